// The tensor-name table (format/tensor_names.h): each family's spelling of a
// role, as the builders load and the synth recipes write it, and errors that name
// the role and the family when a family has no such tensor.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "format/model_family.h"
#include "format/tensor_names.h"
#include "support/test_support.h"

namespace sluice::tensor_names_test {
namespace {

using R = TensorRole;

const TensorNames& names_of(const char* model_type) {
  const ModelFamily* f = find_model_family(model_type);
  EXPECT_NE(f, nullptr) << model_type;
  return *f->tensors;
}

TEST(TensorNames, EachFamilySpellsItsRelease) {
  EXPECT_EQ(names_of("deepseek_v3")(R::AttnKvA, 3), "model.layers.3.self_attn.kv_a_proj_with_mqa");
  EXPECT_EQ(names_of("kimi_k2")(R::MoeScoreBias, 1), "model.layers.1.mlp.gate.e_score_correction_bias");
  EXPECT_EQ(names_of("qwen3_moe").weight(R::AttnQ, 0), "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(names_of("qwen3_moe").bias(R::AttnV, 12), "model.layers.12.self_attn.v_proj.bias");
  EXPECT_EQ(names_of("gpt_oss").bias(R::MoeRouter, 5), "model.layers.5.mlp.router.bias");
  EXPECT_EQ(names_of("gpt_oss")(R::AttnSinks, 0), "model.layers.0.self_attn.sinks");
  EXPECT_EQ(names_of("kimi_linear")(R::MoeRouter, 2), "model.layers.2.block_sparse_moe.gate");
  EXPECT_EQ(names_of("kimi_k3")(R::KdaALog, 7), "model.layers.7.self_attn.A_log");
  EXPECT_EQ(names_of("kimi_k3")(R::OutAttnResProj), "model.output_attn_res_proj.weight");
  EXPECT_EQ(names_of("kimi_k3")(R::TokenEmbedding), "model.embed_tokens.weight");
  EXPECT_EQ(names_of("kimi_k3").weight(R::Output), "lm_head.weight");
  // Routed experts keep their own naming (format/model_family.h), prefix excluded.
  EXPECT_EQ(expert_tensor_base(*find_model_family("kimi_k3"), 4, 17, 1), "model.layers.4.block_sparse_moe.experts.17.w3");
  EXPECT_EQ(expert_tensor_base(*find_model_family("qwen3_moe"), 0, 2, 2), "model.layers.0.mlp.experts.2.down_proj");
}

TEST(TensorNames, FamiliesSharingATableShareNames) {
  EXPECT_EQ(find_model_family("deepseek_v3")->tensors, find_model_family("kimi_k2")->tensors);
  EXPECT_EQ(find_model_family("kimi_linear")->tensors, find_model_family("kimi_k3")->tensors);
  std::set<const TensorNames*> tables;
  for (const ModelFamily& f : model_families()) {
    ASSERT_NE(f.tensors, nullptr) << f.model_type;
    tables.insert(f.tensors);
    // Every family names what every decoder has.
    for (R r : {R::TokenEmbedding, R::Output, R::OutputNorm, R::AttnNorm, R::FfnNorm, R::AttnO})
      EXPECT_TRUE(f.tensors->has(r)) << f.model_type << " " << tensor_role_name(r);
  }
  EXPECT_EQ(tables.size(), 4u);
}

TEST(TensorNames, MissingRoleOrLayerNamesTheRoleAndFamily) {
  EXPECT_FALSE(names_of("qwen3_moe").has(R::KdaALog));
  EXPECT_EQ(test::error_of([] { names_of("qwen3_moe")(R::KdaALog, 0); }),
            "internal: the qwen3_moe tensor names have no KdaALog");
  EXPECT_EQ(test::error_of([] { names_of("gpt_oss")(R::AttnQ); }),
            "internal: the gpt_oss tensor AttnQ is per layer, and no layer was given");
  EXPECT_EQ(tensor_role_name(R::AttnResProj), "AttnResProj");
  EXPECT_EQ(tensor_role_name(R::TokenEmbedding), "TokenEmbedding");
}

}  // namespace
}  // namespace sluice::tensor_names_test
