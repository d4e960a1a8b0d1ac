#include "compute/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "compute/cuda/cuda_kernels.h"
#include "kernels/qmatrix.h"
#include "util/error.h"

namespace sluice {

namespace {

[[noreturn]] void cuda_fail(cudaError_t e, const std::string& what) {
  if (e == cudaErrorMemoryAllocation)
    fail("CUDA: out of device memory while {} (lower --vram, or run a smaller model on this GPU)", what);
  fail("CUDA error while {}: {} ({})", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

uint64_t align16(uint64_t n) { return (n + 15) & ~uint64_t(15); }

// Bytes of scales a view of W's rows addresses, where they start on the host,
// and the row offset the device view keeps (FP8 scale rows cover `block` rows).
struct ScaleSpan {
  const uint8_t* host = nullptr;
  uint64_t bytes = 0;
  int64_t row0 = 0;
};
ScaleSpan scale_span(const QMatrix& m) {
  ScaleSpan s;
  const auto* base = static_cast<const uint8_t*>(m.scale);
  switch (m.fmt) {
    case WeightFormat::F32:
    case WeightFormat::BF16:
    case WeightFormat::F16: break;
    case WeightFormat::FP8_E4M3_BLOCK: {
      const int64_t first = m.row0 / m.block, last = (m.row0 + m.rows - 1) / m.block;
      s.host = base + first * m.scale_stride * 4;
      s.bytes = uint64_t((last - first + 1) * m.scale_stride * 4);
      s.row0 = m.row0 - first * m.block;
      break;
    }
    case WeightFormat::INT4_GROUP:
      s.host = base + m.row0 * m.scale_stride * 2;
      s.bytes = uint64_t(m.rows * m.scale_stride * 2);
      break;
    case WeightFormat::MXFP4:
      s.host = base + m.row0 * m.scale_stride;
      s.bytes = uint64_t(m.rows * m.scale_stride);
      break;
    case WeightFormat::INT8_ROW:
      s.host = base + m.row0 * 4;
      s.bytes = uint64_t(m.rows * 4);
      break;
  }
  return s;
}

}  // namespace

struct CudaBackend::Impl {
  int index = 0;
  cudaStream_t stream = nullptr;  // every op
  cudaStream_t copy_stream = nullptr;  // weight and expert copies
  cudaEvent_t compute_done = nullptr;  // copies wait for the compute stream through it
  bool sync_each = false;
  bool defer_checks = true;  // Backend::defers_finite_checks
  uint64_t attention_partials_limit = 512ull << 20;  // set_attention_partials_limit
  // SLUICE_CUDA_PROFILE=1: events on the compute stream where each op begins and ends; an op is
  // charged the GPU time from its start to its end (its kernels and anything it waited for inside),
  // the GPU time from one op's end to the next one's start is the GPU waiting for the host; summed
  // per op name and printed when the backend ends.
  struct Profile {
    bool on = false;
    cudaEvent_t prev = nullptr;   // the end of the last op settled
    cudaEvent_t start = nullptr;  // the start of the op being issued (began), if marked
    struct Op {
      std::string name;
      cudaEvent_t start, end;
    };
    std::vector<Op> pending;
    std::map<std::string, std::pair<double, int64_t>> totals;  // ms, calls
    std::chrono::steady_clock::time_point started;
  } profile;
  uint64_t weight_bytes = 0;
  std::deque<QMatrix> placed;      // device views Matrix::device points at
  std::vector<void*> owned;        // weight allocations, freed at destruction
  struct RopeTable {
    std::vector<double> host;
    double* dev = nullptr;
  };
  std::map<const Rope*, RopeTable> ropes;
  cuda::NonFiniteRecord* watch = nullptr;  // the deferred finite check's record (allocated on first use)
  cuda::NonFiniteRecord* nonfinite_record();

  void check(cudaError_t e, const char* what) const {
    if (e != cudaSuccess) cuda_fail(e, what);
  }
  // After a launch: its error, and with SLUICE_CUDA_SYNC=1 any fault it caused.
  // profile_name: what the profile calls the op, when not `op` (made only while profiling).
  void launched(int e, const char* op, std::string profile_name = {}) {
    if (e != 0) cuda_fail(cudaError_t(e), fmt::format("running {}", op));
    if (sync_each) check(cudaStreamSynchronize(stream), op);
    if (profile.on) profiled(profile_name.empty() ? std::string(op) : std::move(profile_name));
  }
  // A product's profile name: format, shape and the row count rounded up to a power of two.
  std::string product_name(const char* op, WeightFormat f, int64_t rows, int64_t cols, int64_t n) const {
    if (!profile.on) return {};
    int64_t p2 = 1;
    while (p2 < n) p2 *= 2;
    return fmt::format("{} {} {}x{} n<={}", op, weight_format_name(f), rows, cols, p2);
  }
  cudaEvent_t profile_event() {
    cudaEvent_t ev = nullptr;
    check(cudaEventCreate(&ev), "creating a profile event");
    check(cudaEventRecord(ev, stream), "recording a profile event");
    return ev;
  }
  void began() {
    if (!profile.on) return;
    if (profile.start) cudaEventDestroy(profile.start);
    profile.start = profile_event();
  }
  void profiled(std::string op) {
    cudaEvent_t start = profile.start, end = profile_event();
    profile.start = nullptr;
    if (!profile.prev) {  // the first op: the GPU's time before it is not its own
      if (start) cudaEventDestroy(start);
      profile.prev = end;
      profile.started = std::chrono::steady_clock::now();
      return;
    }
    profile.pending.push_back({std::move(op), start, end});
    if (profile.pending.size() >= 4096) settle_profile();
  }
  void add_time(const std::string& name, cudaEvent_t from, cudaEvent_t to) {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, from, to), "reading a profile event");
    auto& t = profile.totals[name];
    t.first += ms;
    ++t.second;
  }
  void settle_profile() {
    if (profile.pending.empty()) return;
    check(cudaEventSynchronize(profile.pending.back().end), "waiting for profile events");
    for (auto& op : profile.pending) {
      if (op.start) {  // the op's own span, and the GPU's wait for the host before it
        add_time("(GPU waiting for the host) before " + op.name, profile.prev, op.start);
        add_time(op.name, op.start, op.end);
        cudaEventDestroy(op.start);
      } else {  // a later launch of the same op: from the previous launch's end
        add_time(op.name, profile.prev, op.end);
      }
      cudaEventDestroy(profile.prev);
      profile.prev = op.end;
    }
    profile.pending.clear();
  }
  void print_profile() {
    settle_profile();
    if (profile.prev) cudaEventDestroy(profile.prev);
    if (profile.start) cudaEventDestroy(profile.start);
    std::vector<std::pair<std::string, std::pair<double, int64_t>>> rows(profile.totals.begin(), profile.totals.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
    double sum = 0;
    for (const auto& r : rows) sum += r.second.first;
    const double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - profile.started).count();
    std::fprintf(stderr, "cuda:%d profile (SLUICE_CUDA_PROFILE): %.1f ms of GPU time from the first op's end to the last op's, %.1f ms of wall time since the first op\n",
                 index, sum, wall);
    std::fprintf(stderr, "%10s %6s %10s %8s  %s\n", "ms", "share", "calls", "us/call", "op");
    for (const auto& [name, t] : rows)
      std::fprintf(stderr, "%10.2f %5.1f%% %10lld %8.1f  %s\n", t.first, sum > 0 ? 100 * t.first / sum : 0.0,
                   static_cast<long long>(t.second), 1000 * t.first / double(t.second), name.c_str());
  }
  void* stream_alloc(uint64_t bytes, const char* what) const {
    void* p = nullptr;
    const cudaError_t e = cudaMallocAsync(&p, bytes ? bytes : 1, stream);
    if (e != cudaSuccess) {
      cudaGetLastError();  // a failed allocation is not sticky: clear it so the next launch check is not blamed
      cuda_fail(e, fmt::format("allocating {} bytes for {}", bytes, what));
    }
    return p;
  }
  void stream_free(void* p) const {
    if (p) cudaFreeAsync(p, stream);
  }
  // A row list for a launch: inline when short, else copied in order on the stream (free_rows after the launch).
  cuda::RowList rows_of(const std::vector<int64_t>& rows, const std::vector<float>* weights) const {
    cuda::RowList l;
    l.n = int64_t(rows.size());
    if (l.n <= cuda::kInlineRows) {
      for (int64_t i = 0; i < l.n; ++i) {
        l.inline_rows[i] = rows[size_t(i)];
        l.inline_weights[i] = weights ? (*weights)[size_t(i)] : 0.0f;
      }
    } else {
      l.rows = upload_small(rows, "row indices");
      if (weights) l.weights = upload_small(*weights, "expert weights");
    }
    return l;
  }
  void free_rows(const cuda::RowList& l) const {
    stream_free(const_cast<int64_t*>(l.rows));
    stream_free(const_cast<float*>(l.weights));
  }
  // Small host arrays the kernels read, copied in order on the stream.
  template <typename T>
  T* upload_small(const std::vector<T>& v, const char* what) const {
    T* d = static_cast<T*>(stream_alloc(v.size() * sizeof(T), what));
    check(cudaMemcpyAsync(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, stream), what);
    return d;
  }
};

CudaBackend::CudaBackend(int index) : impl_(std::make_unique<Impl>()) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0)
    fail("--device cuda:{}: no CUDA device is usable here ({})", index,
         e != cudaSuccess ? cudaGetErrorString(e) : "the driver sees no GPU");
  if (index < 0 || index >= count) fail("--device cuda:{}: this machine has {} CUDA device(s)", index, count);
  impl_->index = index;
  impl_->check(cudaSetDevice(index), "selecting the device");
  impl_->check(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking), "creating the compute stream");
  impl_->check(cudaStreamCreateWithFlags(&impl_->copy_stream, cudaStreamNonBlocking), "creating the copy stream");
  impl_->check(cudaEventCreateWithFlags(&impl_->compute_done, cudaEventDisableTiming), "creating an event");
  // Activations come and go every op: keep freed memory in the stream-ordered pool.
  cudaMemPool_t pool;
  impl_->check(cudaDeviceGetDefaultMemPool(&pool, index), "reading the memory pool");
  uint64_t keep = UINT64_MAX;
  impl_->check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), "configuring the memory pool");
  const char* sync = std::getenv("SLUICE_CUDA_SYNC");
  impl_->sync_each = sync && *sync && std::strcmp(sync, "0") != 0;
  const char* wait = std::getenv("SLUICE_CUDA_FINITE_WAIT");
  impl_->defer_checks = !(wait && *wait && std::strcmp(wait, "0") != 0);
  const char* prof = std::getenv("SLUICE_CUDA_PROFILE");
  impl_->profile.on = prof && *prof && std::strcmp(prof, "0") != 0;
}

CudaBackend::~CudaBackend() {
  cudaStreamSynchronize(impl_->stream);
  if (impl_->profile.on) impl_->print_profile();
  for (void* p : impl_->owned) cudaFree(p);
  for (auto& [_, r] : impl_->ropes) cudaFree(r.dev);
  if (impl_->watch) cudaFree(impl_->watch);
  cudaStreamDestroy(impl_->stream);
  cudaStreamDestroy(impl_->copy_stream);
  cudaEventDestroy(impl_->compute_done);
}

Backend& cuda_backend(int index) {
  static std::mutex m;
  static std::map<int, std::unique_ptr<CudaBackend>> backends;
  std::lock_guard<std::mutex> lock(m);
  auto& b = backends[index];
  if (!b) b = std::make_unique<CudaBackend>(index);
  return *b;
}

int CudaBackend::device_index() const { return impl_->index; }
uint64_t CudaBackend::weight_bytes() const { return impl_->weight_bytes; }
uint64_t CudaBackend::free_device_bytes() const {
  size_t free = 0, total = 0;
  impl_->check(cudaMemGetInfo(&free, &total), "reading free device memory");
  return free;
}

void CudaBackend::synchronize(const char* what) { impl_->check(cudaStreamSynchronize(impl_->stream), what); }

// ---- memory and transfers

float* CudaBackend::allocate(int64_t floats) {
  auto* p = static_cast<float*>(impl_->stream_alloc(uint64_t(floats) * 4, "activations"));
  impl_->check(cudaMemsetAsync(p, 0, size_t(floats) * 4, impl_->stream), "zeroing activations");
  return p;
}

void CudaBackend::deallocate(float* p) { impl_->stream_free(p); }

void CudaBackend::upload(const float* host, Tensor dst) {
  if (dst.empty()) return;
  impl_->check(cudaMemcpy2DAsync(dst.data(), size_t(dst.ld()) * 4, host, size_t(dst.cols()) * 4, size_t(dst.cols()) * 4,
                                 size_t(dst.rows()), cudaMemcpyHostToDevice, impl_->stream),
               "copying values to the device");
}

void CudaBackend::download(Tensor src, float* host) {
  if (src.empty()) return;
  impl_->check(cudaMemcpy2DAsync(host, size_t(src.cols()) * 4, src.data(), size_t(src.ld()) * 4, size_t(src.cols()) * 4,
                                 size_t(src.rows()), cudaMemcpyDeviceToHost, impl_->stream),
               "copying values from the device");
  impl_->check(cudaStreamSynchronize(impl_->stream), "the forward pass (a kernel before this download failed)");
}

int64_t CudaBackend::first_nonfinite(Tensor x) {
  impl_->began();
  auto* first = static_cast<unsigned long long*>(impl_->stream_alloc(sizeof(unsigned long long), "the finite check"));
  impl_->check(cudaMemsetAsync(first, 0xFF, sizeof(unsigned long long), impl_->stream), "the finite check");
  impl_->launched(cuda::first_nonfinite(x.data(), x.ld(), x.rows(), x.cols(), first, impl_->stream), "finite check");
  unsigned long long host = 0;
  impl_->check(cudaMemcpyAsync(&host, first, sizeof host, cudaMemcpyDeviceToHost, impl_->stream), "the finite check");
  impl_->stream_free(first);
  impl_->check(cudaStreamSynchronize(impl_->stream), "the finite check");
  return host == ~0ull ? -1 : int64_t(host);
}

cuda::NonFiniteRecord* CudaBackend::Impl::nonfinite_record() {
  if (!watch) {
    check(cudaMalloc(&watch, sizeof(cuda::NonFiniteRecord)), "allocating the finite check's record");
    check(cudaMemsetAsync(watch, 0xFF, sizeof(cuda::NonFiniteRecord), stream), "the finite check");
  }
  return watch;
}

bool CudaBackend::defers_finite_checks() const { return impl_->defer_checks; }

void CudaBackend::set_attention_partials_limit(uint64_t bytes) { impl_->attention_partials_limit = bytes; }

void CudaBackend::clear_nonfinite() {
  impl_->check(cudaMemsetAsync(impl_->nonfinite_record(), 0xFF, sizeof(cuda::NonFiniteRecord), impl_->stream),
               "the finite check");
}

void CudaBackend::watch_nonfinite(Tensor x, int64_t tag) {
  impl_->began();
  impl_->launched(cuda::watch_nonfinite(x.data(), x.ld(), x.rows(), x.cols(), tag, impl_->nonfinite_record(),
                                        impl_->stream),
                  "finite check");
}

Backend::NonFinite CudaBackend::take_nonfinite() {
  cuda::NonFiniteRecord* rec = impl_->nonfinite_record();
  cuda::NonFiniteRecord host{};
  impl_->check(cudaMemcpyAsync(&host, rec, sizeof host, cudaMemcpyDeviceToHost, impl_->stream), "the finite check");
  impl_->check(cudaMemsetAsync(rec, 0xFF, sizeof host, impl_->stream), "the finite check");
  impl_->check(cudaStreamSynchronize(impl_->stream), "the forward pass (a kernel before the finite check failed)");
  if (host.key == ~0ull) return {};
  return {int64_t(host.key >> 40), int64_t(host.key & ((1ull << 40) - 1)), host.value};
}

void CudaBackend::copy(Tensor src, Tensor dst) {
  if (src.rows() != dst.rows() || src.cols() != dst.cols())
    fail("internal: copy of [{}, {}] into [{}, {}]", src.rows(), src.cols(), dst.rows(), dst.cols());
  if (src.empty()) return;
  impl_->check(cudaMemcpy2DAsync(dst.data(), size_t(dst.ld()) * 4, src.data(), size_t(src.ld()) * 4,
                                 size_t(src.cols()) * 4, size_t(src.rows()), cudaMemcpyDeviceToDevice, impl_->stream),
               "copying on the device");
}

void CudaBackend::zero(Tensor dst) {
  if (dst.empty()) return;
  impl_->check(cudaMemset2DAsync(dst.data(), size_t(dst.ld()) * 4, 0, size_t(dst.cols()) * 4, size_t(dst.rows()),
                                 impl_->stream),
               "zeroing device memory");
}

// ---- weights

uint64_t CudaBackend::placed_bytes(const QMatrix& m) { return align16(uint64_t(m.nbytes())) + align16(scale_span(m).bytes); }

QMatrix CudaBackend::place_into(const QMatrix& host, uint8_t* dst) {
  if (host.fmt == WeightFormat::FP8_E4M3_BLOCK && host.block % 16 != 0)
    fail("CUDA: FP8 block size {} is not a multiple of 16", host.block);
  const ScaleSpan s = scale_span(host);
  QMatrix d = host;
  d.data = dst;
  // The copy waits for the kernels already enqueued: they may still read what
  // `dst` held (an evicted expert), or memory the pool handed out again.
  impl_->check(cudaEventRecord(impl_->compute_done, impl_->stream), "ordering a weight copy");
  impl_->check(cudaStreamWaitEvent(impl_->copy_stream, impl_->compute_done, 0), "ordering a weight copy");
  impl_->check(cudaMemcpyAsync(dst, host.data, size_t(host.nbytes()), cudaMemcpyHostToDevice, impl_->copy_stream),
               "copying weights to the device");
  if (s.bytes) {
    uint8_t* sd = dst + align16(uint64_t(host.nbytes()));
    impl_->check(cudaMemcpyAsync(sd, s.host, s.bytes, cudaMemcpyHostToDevice, impl_->copy_stream),
                 "copying weight scales to the device");
    d.scale = sd;
    d.row0 = s.row0;
  }
  impl_->check(cudaStreamSynchronize(impl_->copy_stream), "copying weights to the device");
  return d;
}

bool CudaBackend::pin_host(void* p, uint64_t bytes) {
  const cudaError_t e = cudaHostRegister(p, bytes, cudaHostRegisterDefault);
  if (e == cudaSuccess) return true;
  cudaGetLastError();
  std::fprintf(stderr, "sluice: could not page-lock the %.2f GiB expert cache for GPU copies (%s); copies run slower\n",
               double(bytes) / double(1ull << 30), cudaGetErrorString(e));
  return false;
}

void CudaBackend::unpin_host(void* p) {
  cudaStreamSynchronize(impl_->copy_stream);
  cudaHostUnregister(p);
}

CudaBackend::DeviceBytes CudaBackend::allocate_bytes(uint64_t bytes, const char* what) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it
    cuda_fail(e, fmt::format("allocating {} bytes for {}", bytes, what));
  }
  return {static_cast<uint8_t*>(p), bytes};
}

void CudaBackend::free_bytes(DeviceBytes b) {
  if (!b.data) return;
  // Kernels already enqueued may still read it.
  impl_->check(cudaStreamSynchronize(impl_->stream), "freeing device memory");
  cudaFree(b.data);
}

Matrix CudaBackend::matrix(const QMatrix& host) {
  if (host.rows == 0) return Matrix{host, nullptr};
  const uint64_t bytes = placed_bytes(host);
  DeviceBytes b = allocate_bytes(bytes, fmt::format("a [{}, {}] {} weight", host.rows, host.cols,
                                                    weight_format_name(host.fmt)).c_str());
  impl_->owned.push_back(b.data);
  impl_->weight_bytes += bytes;
  impl_->placed.push_back(place_into(host, b.data));
  return Matrix{host, &impl_->placed.back()};
}

Vector CudaBackend::vector(const float* host, int64_t n) {
  if (!host || n == 0) return Vector{host, nullptr, n};
  DeviceBytes b = allocate_bytes(uint64_t(n) * 4, "a weight vector");
  impl_->owned.push_back(b.data);
  impl_->weight_bytes += uint64_t(n) * 4;
  impl_->check(cudaMemcpy(b.data, host, size_t(n) * 4, cudaMemcpyHostToDevice), "copying a weight vector");
  return Vector{host, b.data, n};
}

namespace {
const float* dev(const Vector& v) { return static_cast<const float*>(v.device); }

// A matrix's device view; one without (a routed expert outside the VRAM
// cache) is copied into stream-ordered memory for the call.
class DeviceView {
 public:
  DeviceView(CudaBackend& be, void* (*alloc)(CudaBackend&, uint64_t), void (*release)(CudaBackend&, void*),
             const Matrix& m)
      : be_(be), release_(release) {
    if (m.device || m.empty()) {
      q_ = m.device ? *static_cast<const QMatrix*>(m.device) : m.q;
      return;
    }
    tmp_ = alloc(be, CudaBackend::placed_bytes(m.q));
    q_ = be.place_into(m.q, static_cast<uint8_t*>(tmp_));
  }
  ~DeviceView() {
    if (tmp_) release_(be_, tmp_);
  }
  DeviceView(const DeviceView&) = delete;
  DeviceView& operator=(const DeviceView&) = delete;
  const QMatrix& q() const { return q_; }

 private:
  CudaBackend& be_;
  void (*release_)(CudaBackend&, void*);
  void* tmp_ = nullptr;
  QMatrix q_;
};
}  // namespace

#define SLUICE_VIEW(name, m)                                                                                    \
  DeviceView name(                                                                                              \
      *this, [](CudaBackend& b, uint64_t n) -> void* { return b.impl_->stream_alloc(n, "a routed expert"); }, \
      [](CudaBackend& b, void* p) { b.impl_->stream_free(p); }, m)

// ---- products

void CudaBackend::matmul(const Matrix& w, Tensor x, Tensor y) {
  impl_->began();
  if (x.cols() != w.cols() || y.cols() != w.rows() || x.rows() != y.rows())
    fail("internal: matmul of [{}, {}] weight with [{}, {}] into [{}, {}]", w.rows(), w.cols(), x.rows(), x.cols(),
         y.rows(), y.cols());
  SLUICE_VIEW(W, w);
  impl_->launched(cuda::matmul(W.q(), x.data(), x.rows(), x.ld(), y.data(), y.ld(), impl_->stream), "matmul",
                  impl_->product_name("matmul", w.q.fmt, w.rows(), w.cols(), x.rows()));
}

// ---- element-wise

void CudaBackend::rmsnorm(Tensor x, const Vector& w, float eps, Tensor out, int64_t group) {
  impl_->began();
  impl_->launched(cuda::rmsnorm(x.data(), x.ld(), x.rows(), x.cols(), dev(w), eps, out.data(), out.ld(), group,
                                impl_->stream),
                  "rmsnorm");
}

void CudaBackend::l2norm(Tensor x, int64_t group, float eps, float mul) {
  impl_->began();
  impl_->launched(cuda::l2norm(x.data(), x.ld(), x.rows(), x.cols(), group, eps, mul, impl_->stream), "l2norm");
}

void CudaBackend::add(Tensor x, Tensor y) {
  impl_->began();
  impl_->launched(cuda::add(x.data(), x.ld(), y.data(), y.ld(), y.rows(), y.cols(), impl_->stream), "add");
}

void CudaBackend::add_row(const Vector& b, Tensor y) {
  impl_->began();
  impl_->launched(cuda::add_row(dev(b), y.data(), y.ld(), y.rows(), y.cols(), impl_->stream), "add_row");
}

void CudaBackend::mul_sigmoid(Tensor g, Tensor y) {
  impl_->began();
  impl_->launched(cuda::mul_sigmoid(g.data(), g.ld(), y.data(), y.ld(), y.rows(), y.cols(), impl_->stream),
                  "mul_sigmoid");
}

void CudaBackend::sigmoid(Tensor x) {
  impl_->began();
  impl_->launched(cuda::sigmoid(x.data(), x.ld(), x.rows(), x.cols(), impl_->stream), "sigmoid");
}

void CudaBackend::gated(const GatedActivation& act, Tensor g, Tensor u, Tensor out) {
  impl_->began();
  impl_->launched(cuda::gated(act, g.data(), g.ld(), u.data(), u.ld(), out.data(), out.ld(), g.rows(), g.cols(),
                              impl_->stream),
                  "gated activation");
}

void CudaBackend::gated_interleaved(const GatedActivation& act, Tensor gu, Tensor out) {
  impl_->began();
  impl_->launched(cuda::gated_interleaved(act, gu.data(), gu.ld(), out.data(), out.ld(), out.rows(), out.cols(),
                                          impl_->stream),
                  "gated activation");
}

void CudaBackend::rope(const Rope& rope, Tensor x, int64_t heads, int64_t stride, int64_t offset, int64_t pos0) {
  impl_->began();
  auto& t = impl_->ropes[&rope];
  if (t.host != rope.inv_freq) {  // first use, or another Rope at the same address
    if (t.dev) {
      impl_->check(cudaStreamSynchronize(impl_->stream), "rope");
      cudaFree(t.dev);
      t.dev = nullptr;
    }
    t.host = rope.inv_freq;
    impl_->check(cudaMalloc(&t.dev, std::max<size_t>(1, t.host.size()) * sizeof(double)), "allocating rope frequencies");
    impl_->check(cudaMemcpy(t.dev, t.host.data(), t.host.size() * sizeof(double), cudaMemcpyHostToDevice),
                 "copying rope frequencies");
  }
  impl_->launched(cuda::rope(t.dev, rope.dim, rope.interleaved, rope.attention_factor, x.data(), x.ld(), x.rows(),
                             heads, stride, offset, pos0, impl_->stream),
                  "rope");
}

void CudaBackend::embed(const Matrix& table, const int32_t* tokens, int64_t n, Tensor out) {
  impl_->began();
  SLUICE_VIEW(W, table);
  const cuda::RowList ids = impl_->rows_of(std::vector<int64_t>(tokens, tokens + n), nullptr);
  impl_->launched(cuda::embed(W.q(), ids, out.data(), out.ld(), impl_->stream), "embedding lookup");
  impl_->free_rows(ids);
}

// ---- attention cores

void CudaBackend::mla_attend(const MlaShape& s, const Matrix& kv_b, Tensor q, Tensor cache, int64_t pos, Tensor o) {
  impl_->began();
  SLUICE_VIEW(W, kv_b);
  if (s.kv_lora > 512)
    fail("MLA attention on the GPU: a latent of {} columns (kv_lora_rank) is more than the 512 it supports",
         s.kv_lora);
  cuda::MlaArgs a{s.n_heads, s.kv_lora, s.rope_dim, s.nope,    s.v_dim, s.scale, W.q(),   q.data(), q.ld(),
                  q.rows(),  cache.data(), cache.ld(), pos, o.data(), o.ld(),   nullptr, nullptr, nullptr,
                  cuda::mla_splits(pos, q.rows())};
  // The splits in parallel while their partials take at most 512 MiB (a one-token step at 20k
  // positions: 96 heads x 157 splits x 514 floats, 31 MB; a 16-token verify pass 0.5 GB); a longer
  // pass has rows enough to fill the GPU and folds them block by block, with no partials.
  const uint64_t part = uint64_t(a.T * a.H * a.splits * (a.C + 2)), latent = uint64_t(a.T * a.H * a.C);
  const uint64_t room = part * 4 <= impl_->attention_partials_limit ? part : 0;
  float* scratch = static_cast<float*>(impl_->stream_alloc((room + 2 * latent) * 4, "attention scratch"));
  a.qabs = scratch;
  a.ctx = a.qabs + latent;
  a.part = room ? a.ctx + latent : nullptr;
  impl_->launched(cuda::mla_attend(a, impl_->stream), "MLA attention");
  impl_->stream_free(scratch);
}

void CudaBackend::gqa_attend(const GqaShape& s, const Vector& sinks, Tensor q, Tensor k, Tensor v, int64_t pos,
                             Tensor o) {
  impl_->began();
  cuda::GqaArgs a{s.n_heads, s.n_kv_heads, s.head_dim, s.window, s.scale, dev(sinks), q.data(), q.ld(), q.rows(),
                  k.data(), v.data(), k.ld(), v.ld(), pos, o.data(), o.ld(), nullptr};
  a.scratch = static_cast<float*>(impl_->stream_alloc(uint64_t(a.T * a.H * (pos + a.T + 1)) * 4, "attention scores"));
  impl_->launched(cuda::gqa_attend(a, impl_->stream), "GQA attention");
  impl_->stream_free(a.scratch);
}

void CudaBackend::short_conv(const Vector& w, int64_t K, Tensor hist, Tensor x) {
  impl_->began();
  impl_->launched(cuda::short_conv(dev(w), K, hist.data(), hist.ld(), x.data(), x.ld(), x.rows(), x.cols(),
                                   impl_->stream),
                  "KDA short convolution");
}

void CudaBackend::kda_gate(const KdaGate& g, const Vector& a_log, const Vector& dt_bias, Tensor z) {
  impl_->began();
  impl_->launched(cuda::kda_gate(g.kind == KdaGate::Softplus, g.lower_bound, g.n_heads, g.head_dim, dev(a_log),
                                 dev(dt_bias), z.data(), z.ld(), z.rows(), impl_->stream),
                  "KDA decay gate");
}

void CudaBackend::delta_rule(Tensor q, Tensor k, Tensor v, Tensor g, Tensor beta, Tensor S, int64_t heads,
                             int64_t head_dim, Tensor o) {
  impl_->began();
  const bool out = !o.empty();
  impl_->launched(cuda::delta_rule(out ? q.data() : nullptr, q.ld(), k.data(), k.ld(), v.data(), v.ld(), g.data(),
                                   g.ld(), beta.data(), beta.ld(), S.data(), S.ld(), k.rows(), heads, head_dim,
                                   out ? o.data() : nullptr, o.ld(), impl_->stream),
                  "KDA delta rule");
}

void CudaBackend::attn_res_mix(std::span<const Tensor> sources, const Vector& norm, const Vector& proj, float eps,
                               Tensor out) {
  impl_->began();
  if (sources.size() > size_t(cuda::kMaxAttnResSources))
    fail("CUDA: Block AttnRes over {} sources (at most {})", sources.size(), cuda::kMaxAttnResSources);
  cuda::AttnResArgs a{};
  for (size_t i = 0; i < sources.size(); ++i) {
    a.src[i] = sources[i].data();
    a.ld[i] = sources[i].ld();
  }
  a.n = int(sources.size());
  a.norm = dev(norm);
  a.proj = dev(proj);
  a.eps = eps;
  a.out = out.data();
  a.ldo = out.ld();
  a.T = out.rows();
  a.D = out.cols();
  impl_->launched(cuda::attn_res_mix(a, impl_->stream), "Block AttnRes mixing");
}

// ---- mixture of experts

void CudaBackend::gather_rows(Tensor src, const std::vector<int64_t>& rows, Tensor dst) {
  impl_->began();
  if (rows.empty()) return;
  const cuda::RowList r = impl_->rows_of(rows, nullptr);
  impl_->launched(cuda::gather_rows(src.data(), src.ld(), r, src.cols(), dst.data(), dst.ld(), impl_->stream),
                  "gather rows");
  impl_->free_rows(r);
}

void CudaBackend::scatter_add(Tensor src, const std::vector<int64_t>& rows, const std::vector<float>& weights,
                              Tensor acc) {
  impl_->began();
  if (rows.empty()) return;
  if (rows.size() > size_t(cuda::kInlineRows) && acc.rows() <= 65535) {
    // Long lists (a prefill chunk's routed rows): grouped by target row, in order, so
    // every target's sum runs in parallel. Each element sees the same additions in the
    // same order as the one-thread-per-column walk.
    const int64_t n = int64_t(rows.size());
    std::vector<int64_t> count(size_t(acc.rows()), 0);
    for (const int64_t r : rows) ++count[size_t(r)];
    std::vector<int64_t> targets, starts{0}, first(size_t(acc.rows()), -1);
    for (int64_t r = 0; r < acc.rows(); ++r)
      if (count[size_t(r)] > 0) {
        first[size_t(r)] = starts.back();
        targets.push_back(r);
        starts.push_back(starts.back() + count[size_t(r)]);
      }
    std::vector<int64_t> src_rows(static_cast<size_t>(n));
    std::vector<float> wts(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = first[size_t(rows[size_t(i)])]++;
      src_rows[size_t(k)] = i;
      wts[size_t(k)] = weights[size_t(i)];
    }
    // One upload: targets, starts, source rows (int64), then the weights.
    const int64_t nt = int64_t(targets.size());
    std::vector<int64_t> packed;
    packed.reserve(size_t(nt + nt + 1 + n + (n + 1) / 2));
    packed.insert(packed.end(), targets.begin(), targets.end());
    packed.insert(packed.end(), starts.begin(), starts.end());
    packed.insert(packed.end(), src_rows.begin(), src_rows.end());
    packed.resize(packed.size() + size_t((n + 1) / 2), 0);
    std::memcpy(packed.data() + (nt + nt + 1 + n), wts.data(), size_t(n) * sizeof(float));
    int64_t* d = impl_->upload_small(packed, "scatter rows");
    cuda::ScatterPlan plan{nt, d, d + nt, d + nt + nt + 1, reinterpret_cast<const float*>(d + nt + nt + 1 + n)};
    impl_->launched(cuda::scatter_add_by_target(src.data(), src.ld(), plan, acc.cols(), acc.data(), acc.ld(),
                                                impl_->stream),
                    "scatter add");
    impl_->stream_free(d);
    return;
  }
  const cuda::RowList r = impl_->rows_of(rows, &weights);
  impl_->launched(cuda::scatter_add(src.data(), src.ld(), r, acc.cols(), acc.data(), acc.ld(), impl_->stream),
                  "scatter add");
  impl_->free_rows(r);
}

// The group in five launches whatever its size (gate and up together, the activation,
// down, plus the descriptor copies), when every expert has one layout and format and
// no biases; else expert by expert. Each product row is matmul_row of its expert, so
// the result is expert_ffn's bit for bit.
void CudaBackend::expert_ffns(std::span<const ExpertWeights* const> experts, std::span<const int64_t> offsets,
                              const GatedActivation& act, Tensor x, Tensor y) {
  impl_->began();
  const size_t E = experts.size();
  if (offsets.size() != E + 1) fail("internal: expert_ffns with {} experts and {} offsets", E, offsets.size());
  if (E == 0) return;
  const ExpertWeights& e0 = *experts[0];
  bool uniform = E > 1 && E * 2 <= 65535;
  for (size_t i = 0; i < E && uniform; ++i) {
    const ExpertWeights& e = *experts[i];
    uniform = e.gate_up_interleaved == e0.gate_up_interleaved && e.gate.q.fmt == e0.gate.q.fmt &&
              e.down.q.fmt == e0.down.q.fmt && e.gate.rows() == e0.gate.rows() && e.down.rows() == e0.down.rows() &&
              e.gate.cols() == e0.gate.cols() && e.down.cols() == e0.down.cols() && e.gate_up_bias.empty() &&
              e.down_bias.empty() && offsets[i + 1] >= offsets[i] &&
              (e.gate_up_interleaved || (e.up.q.fmt == e0.gate.q.fmt && e.up.rows() == e0.gate.rows() &&
                                         e.up.cols() == e0.gate.cols()));
  }
  if (!uniform) {
    Backend::expert_ffns(experts, offsets, act, x, y);
    return;
  }
  const int64_t r0 = offsets[0], N = offsets[E] - r0;
  if (N <= 0) return;
  // Device views of every matrix (an expert outside the VRAM cache is copied in for the call).
  std::vector<std::unique_ptr<DeviceView>> views;
  auto view = [&](const Matrix& m) -> const QMatrix& {
    views.push_back(std::make_unique<DeviceView>(
        *this, [](CudaBackend& b, uint64_t n) -> void* { return b.impl_->stream_alloc(n, "a routed expert"); },
        [](CudaBackend& b, void* p) { b.impl_->stream_free(p); }, m));
    return views.back()->q();
  };
  // `rows`: the activation matrix whose rows the products take (runs of it, one per expert).
  auto run = [&](const std::vector<cuda::MatmulProblem>& ps, WeightFormat fmt, int64_t max_rows,
                 const cuda::SharedRows& rows, const char* what) {
    // One launch when every matrix takes the same product path (tensor cores or not), which
    // matrices of one layout do; else each product alone (same bits either way).
    const bool tc = cuda::tc_eligible(ps[0].W);
    bool same = true;
    for (const auto& p : ps) same = same && cuda::tc_eligible(p.W) == tc;
    if (!same) {
      for (const auto& p : ps)
        impl_->launched(cuda::matmul(p.W, p.X, p.n, p.ldx, p.Y, p.ldy, impl_->stream), what);
      return;
    }
    cuda::MatmulProblem* d = impl_->upload_small(ps, "expert product descriptors");
    int64_t max_n = 0;
    for (const auto& p : ps) max_n = std::max(max_n, p.n);
    impl_->launched(
        cuda::grouped_matmul(fmt, tc, d, int(ps.size()), max_rows, ps[0].W.cols, max_n, impl_->stream, rows), what,
        impl_->product_name(what, fmt, max_rows, ps[0].W.cols, max_n));
    impl_->stream_free(d);
  };
  auto problem = [](const QMatrix& w, const float* X, int64_t n, int64_t ldx, float* Y, int64_t ldy) {
    cuda::MatmulProblem p;
    p.W = w;
    p.X = X;
    p.Y = Y;
    p.n = n;
    p.ldx = ldx;
    p.ldy = ldy;
    cuda::prepare_problem(p);
    return p;
  };
  std::vector<cuda::MatmulProblem> first, second;
  const float* xd = x.data();
  const cuda::SharedRows xrows{xd + r0 * x.ld(), N, x.ld()};
  if (e0.gate_up_interleaved) {
    const int64_t I2 = e0.gate.rows(), I = I2 / 2;
    Buffer gu(*this, N, I2), h(*this, N, I);
    for (size_t i = 0; i < E; ++i) {
      const int64_t o = offsets[i] - r0, n = offsets[i + 1] - offsets[i];
      float* yi = y.data() + offsets[i] * y.ld();
      first.push_back(problem(view(experts[i]->gate), xd + offsets[i] * x.ld(), n, x.ld(), gu.view().data() + o * I2,
                              I2));
      second.push_back(problem(view(experts[i]->down), h.view().data() + o * I, n, I, yi, y.ld()));
    }
    run(first, e0.gate.q.fmt, I2, xrows, "grouped expert gate/up products");
    gated_interleaved(act, gu, h);
    run(second, e0.down.q.fmt, e0.down.rows(), {h.view().data(), N, I}, "grouped expert down products");
  } else {
    const int64_t I = e0.gate.rows();
    Buffer g(*this, N, I), u(*this, N, I);
    for (size_t i = 0; i < E; ++i) {
      const int64_t o = offsets[i] - r0, n = offsets[i + 1] - offsets[i];
      first.push_back(problem(view(experts[i]->gate), xd + offsets[i] * x.ld(), n, x.ld(), g.view().data() + o * I, I));
      first.push_back(problem(view(experts[i]->up), xd + offsets[i] * x.ld(), n, x.ld(), u.view().data() + o * I, I));
      float* yi = y.data() + offsets[i] * y.ld();
      second.push_back(problem(view(experts[i]->down), g.view().data() + o * I, n, I, yi, y.ld()));
    }
    run(first, e0.gate.q.fmt, I, xrows, "grouped expert gate/up products");
    gated(act, g, u, g);
    run(second, e0.down.q.fmt, e0.down.rows(), {g.view().data(), N, I}, "grouped expert down products");
  }
}

void CudaBackend::expert_ffn(const ExpertWeights& ew, const GatedActivation& act, Tensor x, Tensor y) {
  impl_->began();
  const int64_t n = x.rows();
  SLUICE_VIEW(gate, ew.gate);
  SLUICE_VIEW(down, ew.down);
  auto run = [&](const QMatrix& W, Tensor in, Tensor out, const char* what) {
    impl_->launched(cuda::matmul(W, in.data(), in.rows(), in.ld(), out.data(), out.ld(), impl_->stream), what);
  };
  if (ew.gate_up_interleaved) {
    const int64_t I2 = ew.gate.rows(), I = I2 / 2;
    Buffer gu(*this, n, I2), h(*this, n, I);
    run(gate.q(), x, gu, "expert gate/up product");
    if (!ew.gate_up_bias.empty()) add_row(ew.gate_up_bias, gu);
    gated_interleaved(act, gu, h);
    run(down.q(), h, y, "expert down product");
  } else {
    SLUICE_VIEW(up, ew.up);
    const int64_t I = ew.gate.rows();
    Buffer g(*this, n, I), u(*this, n, I);
    run(gate.q(), x, g, "expert gate product");
    run(up.q(), x, u, "expert up product");
    gated(act, g, u, g);
    run(down.q(), g, y, "expert down product");
  }
  if (!ew.down_bias.empty()) add_row(ew.down_bias, y);
}

}  // namespace sluice
