// Constrained output: a grammar over bytes, and a cursor that says whether a
// token's bytes may come next. Nodes are literals, sequences, alternatives,
// bounded repetitions (with a separator), JSON strings and numbers, free text
// (no '<', bounded) and references (for recursive schemas). The cursor keeps
// every live parse (a small set of stacks), so alternatives need no lookahead
// and a candidate token is checked by feeding its bytes to a copy: the cost is
// the token's length times the live parses, not the reply's length.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::chat {

class Grammar {
 public:
  using Id = int32_t;
  Id lit(std::string s);
  Id seq(std::vector<Id> parts);
  Id alt(std::vector<Id> options);
  // `item` min..max times (max < 0: unbounded), `sep` (or -1) between items.
  Id repeat(Id item, int64_t min, int64_t max, Id sep = -1);
  // A JSON string (escapes, valid UTF-8, no control bytes) of min..max characters (max < 0: any).
  Id json_string(int64_t min_chars = 0, int64_t max_chars = -1);
  Id json_number(bool integer);  // a JSON number (integer: no fraction or exponent)
  // min..max characters of valid UTF-8 text without '<' (free text before structure, K3 string values).
  Id text(int64_t max_chars, int64_t min_chars = 0);
  Id placeholder();              // defined later with define() (recursion)
  void define(Id placeholder, Id target);
  void set_root(Id root) { root_ = root; }
  // A cycle of nodes through which the grammar reaches itself before any byte is
  // written (left recursion: expanding it never ends), in the order followed, the
  // node that closes it last; empty if there is none.
  std::vector<Id> left_cycle() const;
  Id root() const { return root_; }

  enum class Kind : uint8_t { Lit, Seq, Alt, Repeat, String, Number, Text, Ref };
  struct Node {
    Kind kind;
    std::string lit;
    std::vector<Id> kids;
    int64_t min = 0, max = -1;
    Id sep = -1;
    bool integer = false;
  };
  const Node& node(Id id) const { return nodes_[size_t(id)]; }

 private:
  Id add(Node n);
  std::vector<Node> nodes_;
  Id root_ = -1;
};

// Where the output stands in a grammar. Copyable: try a token on a copy.
class GrammarCursor {
 public:
  explicit GrammarCursor(std::shared_ptr<const Grammar> g);
  // A cursor with no parse (dead): somewhere for advance_into to write.
  struct Empty {};
  GrammarCursor(std::shared_ptr<const Grammar> g, Empty) : g_(std::move(g)) {}
  // Feeds bytes; false (and the cursor is then dead) if no parse can continue with them.
  bool feed(std::string_view bytes);
  // Whether these bytes could come next (the cursor is unchanged).
  bool allows(std::string_view bytes) const;
  // The cursor after byte c, written into `out` (its buffers reused); false, and
  // `out` holds no parse, if no parse takes c. This cursor is unchanged.
  bool advance_into(unsigned char c, GrammarCursor& out) const;
  bool complete() const;  // the output so far is a whole sentence of the grammar
  bool can_continue() const;  // some parse takes more bytes
  bool dead() const { return threads_.empty(); }
  const std::shared_ptr<const Grammar>& grammar() const { return g_; }

  struct Frame {
    Grammar::Id node;
    int64_t i = 0;  // literal offset / next part / items so far / characters so far
    int32_t st = 0;  // string or number state
    auto operator<=>(const Frame&) const = default;
  };
  using Thread = std::vector<Frame>;

 private:
  // `steps` counts the calls of one expansion; past its budget it throws (no grammar hangs a request).
  void expand(Thread t, std::vector<Thread>& out, int depth, int64_t& steps) const;
  // expand() of a Repeat frame on top of t: another item, and the end where enough came.
  void expand_repeat(Thread t, const Grammar::Node& n, std::vector<Thread>& out, int depth, int64_t& steps) const;
  void step(const Thread& t, unsigned char c, std::vector<Thread>& out) const;
  // Every parse stepped over c into `next` (cleared first), sorted, duplicates
  // dropped; whether any is left.
  bool step_all(unsigned char c, std::vector<Thread>& next) const;

  std::shared_ptr<const Grammar> g_;
  std::vector<Thread> threads_;  // each ends in a consuming frame, or is empty (accepting)
};

}  // namespace sluice::chat
