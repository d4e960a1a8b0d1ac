// The device the golden and speculation suites run their models on:
// $SLUICE_TEST_DEVICE (cpu, cuda, cuda:N; default the CPU), so
// scripts/test-gpu.sh runs the same suites on a GPU; $SLUICE_TEST_EXPERTS_ON
// (gpu, cpu, auto) says where the routed experts are computed beside it.
#pragma once
#include "engine/engine.h"

namespace sluice::test {
LoadOptions on_test_device();
}  // namespace sluice::test
