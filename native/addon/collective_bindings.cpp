// collective.*: the one collective interface (native/collective/collective.h) as a NativeCollective
// handle — rank, world size, all-reduce of a Float32Array, broadcast and all-gather of bytes,
// barrier, close — and the libraries' probe for `doctor`. Every operation waits on its peers, so each runs on a worker behind a Promise; the
// caller (src/parallel/collective.ts) issues them one at a time, in the same order on every rank.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "addon/collective_handle.h"
#include "addon/guard.h"
#include "addon/marshal.h"
#include "addon/registry.h"
#include "collective/collective.h"

namespace ad::addon {
namespace {

using collective::Collective;

class CollectiveHandle : public GuardedWrap<CollectiveHandle> {
 public:
  static Napi::FunctionReference constructor;
  static void Init(Napi::Env env, Napi::Object exports);
  explicit CollectiveHandle(const Napi::CallbackInfo& info) : GuardedWrap<CollectiveHandle>(info) {}
  std::shared_ptr<Collective> collective;

  std::shared_ptr<Collective> live(Napi::Env env) const {
    if (!collective) throw Napi::Error::New(env, "this collective has been closed");
    return collective;
  }

 private:
  Napi::Value Describe(const Napi::CallbackInfo& info);
  Napi::Value AllReduce(const Napi::CallbackInfo& info);
  Napi::Value Broadcast(const Napi::CallbackInfo& info);
  Napi::Value AllGather(const Napi::CallbackInfo& info);
  Napi::Value Barrier(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info) {
    collective.reset();  // in-flight operations hold their own reference; the last one closes it
    return info.Env().Undefined();
  }
};
Napi::FunctionReference CollectiveHandle::constructor;

template <typename State>
Napi::Promise run_collective(Napi::Env env, std::shared_ptr<Collective> c, State state, typename HeldWorker<Collective, State>::Work work,
                             typename HeldWorker<Collective, State>::Answer answer = nullptr) {
  return HeldWorker<Collective, State>::Start(env, std::move(c), std::move(state), work, answer);
}

std::vector<uint8_t> bytes_arg(Napi::Env env, const Napi::Value& v, const std::string& what) {
  return typed_vector<uint8_t, napi_uint8_array>(env, v, what);
}

Napi::Value bytes_value(Napi::Env env, const std::string& s) {
  auto arr = Napi::Uint8Array::New(env, s.size());
  if (!s.empty()) std::memcpy(arr.Data(), s.data(), s.size());
  return arr;
}

Napi::Value CollectiveHandle::Describe(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto c = live(env);
  Napi::Object o = Napi::Object::New(env);
  o.Set("backend", c->name());
  o.Set("rank", c->rank());
  o.Set("worldSize", c->world_size());
  o.Set("timeoutMs", static_cast<double>(c->timeout_ms()));
  return o;
}

struct ReduceState {
  std::vector<float> data;
  collective::ReduceOp op;
};

// allReduce(Float32Array, 'sum' | 'avg') → Promise<Float32Array> (a new array; the input is copied now)
Napi::Value CollectiveHandle::AllReduce(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto c = live(env);
  ReduceState st{typed_vector<float, napi_float32_array>(env, info[0], "data"), collective::ReduceOp::kSum};
  const std::string op = info.Length() > 1 && info[1].IsString() ? info[1].As<Napi::String>().Utf8Value() : "";
  if (op == "avg") st.op = collective::ReduceOp::kAverage;
  else if (op != "sum") type_error(env, "op must be 'sum' or 'avg'");
  return run_collective<ReduceState>(
      env, c, std::move(st), [](Collective& c, ReduceState& s) { c.all_reduce(s.data.data(), static_cast<int64_t>(s.data.size()), s.op); },
      [](Napi::Env env, ReduceState& s) { return adopt_floats(env, std::move(s.data)); });
}

struct BytesState {
  std::string data;
  int root = 0;
  std::vector<std::string> gathered;
};

// broadcast(Uint8Array, root) → Promise<Uint8Array>: root's bytes on every rank, whatever their length
Napi::Value CollectiveHandle::Broadcast(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto c = live(env);
  std::vector<uint8_t> in = bytes_arg(env, info[0], "data");
  BytesState st{std::string(in.begin(), in.end()), static_cast<int>(integer_arg(env, info[1], "root", 0, c->world_size() - 1)), {}};
  return run_collective<BytesState>(
      env, c, std::move(st),
      [](Collective& c, BytesState& s) {
        int64_t length = static_cast<int64_t>(s.data.size());
        c.broadcast(&length, sizeof(length), s.root);  // the length first: the others size their buffer
        if (length < 0) throw collective::CollectiveError("broadcast: the root sent a negative length", c.rank());
        s.data.resize(static_cast<size_t>(length));
        c.broadcast(s.data.data(), length, s.root);
      },
      [](Napi::Env env, BytesState& s) { return bytes_value(env, s.data); });
}

// allGather(Uint8Array) → Promise<Uint8Array[]>: every rank's bytes, in rank order
Napi::Value CollectiveHandle::AllGather(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto c = live(env);
  std::vector<uint8_t> in = bytes_arg(env, info[0], "data");
  BytesState st{std::string(in.begin(), in.end()), 0, {}};
  return run_collective<BytesState>(
      env, c, std::move(st), [](Collective& c, BytesState& s) { s.gathered = collective::all_gather_bytes(c, s.data); },
      [](Napi::Env env, BytesState& s) -> Napi::Value {
        Napi::Array out = Napi::Array::New(env, s.gathered.size());
        for (size_t r = 0; r < s.gathered.size(); ++r) out.Set(static_cast<uint32_t>(r), bytes_value(env, s.gathered[r]));
        return out;
      });
}

struct Nothing {};

Napi::Value CollectiveHandle::Barrier(const Napi::CallbackInfo& info) {
  return run_collective<Nothing>(info.Env(), live(info.Env()), {}, [](Collective& c, Nothing&) { c.barrier(); });
}

void CollectiveHandle::Init(Napi::Env env, Napi::Object exports) {
  Napi::Function f = DefineClass(env, "NativeCollective",
                                 {method<&CollectiveHandle::Describe>("describe"), method<&CollectiveHandle::AllReduce>("allReduce"),
                                  method<&CollectiveHandle::Broadcast>("broadcast"), method<&CollectiveHandle::AllGather>("allGather"),
                                  method<&CollectiveHandle::Barrier>("barrier"), method<&CollectiveHandle::Close>("close")});
  constructor = Napi::Persistent(f);
  constructor.SuppressDestruct();
  exports.Set("NativeCollective", f);
}

class OpenWorker : public PromiseWorker {
 public:
  OpenWorker(Napi::Env env, collective::OpenOptions o) : PromiseWorker(env), options_(std::move(o)) {}
  void Run() override { collective_ = collective::open(options_); }
  Napi::Value Result() override {
    Napi::Object handle = CollectiveHandle::constructor.New({});
    CollectiveHandle::Unwrap(handle)->collective = std::move(collective_);
    return handle;
  }

 private:
  collective::OpenOptions options_;
  std::shared_ptr<Collective> collective_;
};

// open({ backend: 'mpi' | 'nccl' | 'single', timeoutMs, rank?, worldSize?, uniqueId? }) → Promise<NativeCollective>
// (nccl: uniqueId is rank 0's ncclUniqueId(), handed out by the rendezvous)
Napi::Value Open(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = object_arg(env, info[0], "options");
  collective::OpenOptions opts;
  opts.backend = string_field(o, "backend");
  opts.timeout_ms = int_field(o, "timeoutMs", 1, int64_t(1) << 40);
  if (!absent(field(o, "rank"))) opts.rank = static_cast<int>(int_field(o, "rank", 0, 1 << 20));
  if (!absent(field(o, "worldSize"))) opts.world_size = static_cast<int>(int_field(o, "worldSize", 1, 1 << 20));
  if (!absent(field(o, "uniqueId"))) {
    std::vector<uint8_t> id = bytes_arg(env, field(o, "uniqueId"), "field 'uniqueId'");
    opts.unique_id.assign(id.begin(), id.end());
  }
  return PromiseWorker::Start(std::make_unique<OpenWorker>(env, std::move(opts)));
}

Napi::Value library_status(Napi::Env env, const collective::LibraryStatus& s) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("found", s.found);
  if (s.found) {
    o.Set("path", s.path);
    o.Set("version", s.version);
  } else {
    o.Set("reason", s.reason);
  }
  return o;
}

// ncclUniqueId() → Uint8Array (128 bytes): rank 0's NCCL unique id; its NCCL bootstrap root now listens
Napi::Value NcclUniqueId(const Napi::CallbackInfo& info) {
  return bytes_value(info.Env(), collective::nccl_unique_id());
}

// requireLibrary('mpi' | 'nccl' | 'single'): throws ERR_AD_COLLECTIVE_UNAVAILABLE unless its library was found
Napi::Value RequireLibrary(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsString()) type_error(env, "backend must be a string");
  const std::string backend = info[0].As<Napi::String>().Utf8Value();
  collective::require_library(backend);
  return env.Undefined();
}

// libraries() → { mpi, nccl }: each { found, path?, version?, reason? } (loads each library once)
Napi::Value Libraries(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  o.Set("mpi", library_status(env, collective::mpi_library()));
  o.Set("nccl", library_status(env, collective::nccl_library()));
  return o;
}

}  // namespace

std::shared_ptr<Collective> collective_of(Napi::Env env, Napi::Value v, const char* what) {
  if (!v.IsObject() || !v.As<Napi::Object>().InstanceOf(CollectiveHandle::constructor.Value()))
    throw Napi::TypeError::New(env, std::string(what) + " must be a NativeCollective");
  return CollectiveHandle::Unwrap(v.As<Napi::Object>())->live(env);
}

void RegisterCollectiveBindings(Napi::Env env, Napi::Object exports) {
  CollectiveHandle::Init(env, exports);
  Napi::Object c = Napi::Object::New(env);
  c.Set("open", function<Open>(env, "open"));
  c.Set("libraries", function<Libraries>(env, "libraries"));
  c.Set("ncclUniqueId", function<NcclUniqueId>(env, "ncclUniqueId"));
  c.Set("requireLibrary", function<RequireLibrary>(env, "requireLibrary"));
  exports.Set("collective", c);
}

}  // namespace ad::addon
