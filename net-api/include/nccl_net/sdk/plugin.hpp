// nccl_net/sdk/plugin.hpp: write one class against the newest ncclNet interface; export every ABI version.
//
// A vendor class `Net` provides (all return ncclResult_t; pointers are NCCL's opaque objects):
//
//   static constexpr const char kName[] = "mynet";       // what users put in NCCL_NET=
//   init(const nccl_net::sdk::InitArgs& args, void** ctx) // per communicator (v11+ hosts) or once (older hosts)
//   devices(int* ndev)
//   getProperties(int dev, ncclNetProperties_v12_t* props) // props arrives pre-filled with safe defaults
//   listen(void* ctx, int dev, void* handle, void** listenComm)
//   connect(void* ctx, int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v12_t** sendDevComm)
//   accept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v12_t** recvDevComm)
//                                                        // *DevComm may be NULL (v6, NCCL's GPU Direct probe)
//   regMr(void* comm, void* data, size_t size, int type, void** mhandle)
//   deregMr(void* comm, void* mhandle)
//   isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request)
//   irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
//         void** request)
//   test(void* request, int* done, nccl_net::sdk::CompletedSizes& sizes)
//   closeSend(void* sendComm), closeRecv(void* recvComm), closeListen(void* listenComm)
//
// and optionally: regMrDmaBuf, iflush, getDeviceMr, irecvConsumed, makeVDevice(int*, ncclNetVDeviceProps_v12_t*),
// finalize(void* ctx), setNetAttr(void* ctx, ncclNetAttr_v12_t*), each with its v12 signature. What a method only
// reads (irecv's and iflush's lists, makeVDevice's props, setNetAttr's attr) may be declared const. Absent optional
// functions are NULL in the exported tables where NCCL checks for NULL (getDeviceMr, irecvConsumed, makeVDevice,
// setNetAttr); otherwise the SDK supplies the behaviour NCCL expects (see the defaults below).
//
// NCCL_NET_SDK_EXPORT(Net) then emits ncclNetPlugin_v6 .. ncclNetPlugin_v12. Every down-conversion lives here:
// property structs per version, int vs size_t sizes (a value that cannot be represented is an error, never a
// truncation), arguments a version lacks, functions a version lacks. C++ exceptions never cross the ABI: they
// become an ncclResult_t and one WARN line.
#pragma once

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstring>
#include <exception>
#include <iterator>
#include <mutex>
#include <new>
#include <type_traits>
#include <utility>

#include "../net.h"
#include "handle.hpp"
#include "log.hpp"
#include "result.hpp"
#include "visibility.hpp"

NCCL_NET_SDK_NAMESPACE_BEGIN

// Largest n accepted for a grouped irecv (NCCL groups at most NCCL_PROXY_MAX_SUBS = 64 receives).
inline constexpr int kMaxGroupedRecvs = 64;

namespace detail {
inline bool& optionalRecvCompletionSlot() {
  static thread_local bool optional = false;
  return optional;
}
}  // namespace detail

// Inside your irecv: true when the host passed NCCL_NET_OPTIONAL_RECV_COMPLETION in *request (NCCL 2.24+ for
// LL/LL128 receives, n == 1): it learns of arrival from the data itself and needs no exact completion. The SDK has
// already set *request to NULL; you still return a request (or NULL to be retried) as always.
inline bool recvCompletionOptional() {
  return detail::optionalRecvCompletionSlot();
}

// What the host told init(). Older hosts lack some of it; the SDK fills the newest meaning.
struct InitArgs {
  int abiVersion = NCCL_NET_NEWEST_VERSION;         // the ncclNet_vN table the host called through
  uint64_t commId = 0;                              // the communicator's hash (v11+), 0 before
  int trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF;  // comm config (v10 passed it per connect)
  ncclProfilerCallback_t profiler = nullptr;        // v10+
};

// The sizes test() reports. NCCL's ABI carries them as int in every version, so a completed size above INT_MAX
// cannot be reported: set() refuses it and the SDK turns the test() into an error instead of truncating.
class CompletedSizes {
 public:
  // `room`: how many sizes the host gave (64 for a net test, NCCL_PROXY_MAX_SUBS; 1 for a collNet test).
  explicit CompletedSizes(int* sizes, int room = kMaxGroupedRecvs) : sizes_(sizes), room_(room) {}
  // Taken by reference so the SDK sees an overflow the plugin ran into.
  CompletedSizes(const CompletedSizes&) = delete;
  CompletedSizes& operator=(const CompletedSizes&) = delete;
  // NCCL passes NULL when it does not want sizes (flush requests); setting them is then a no-op.
  bool wanted() const { return sizes_ != nullptr; }
  // `index` is the grouped receive's (0 for a send: NCCL passes a single int for a send's size, and room for 64 for
  // a receive's); one outside the host's room is refused too, as a write there would land on the host's stack. The
  // request is the plugin's own, so the SDK cannot tell a send's from a receive's: for a send only index 0 is safe,
  // and one above it passes this check (set only 0 for a send).
  bool set(int index, size_t bytes) {
    if (index < 0 || index >= room_) {
      badIndex_ = index;
      return false;
    }
    if (sizes_ == nullptr) return true;  // no size asked for: none to overflow (a flush's test of > 2 GiB failed)
    if (bytes > static_cast<size_t>(INT_MAX)) {
      overflowIndex_ = index;
      overflowBytes_ = bytes;
      return false;
    }
    sizes_[index] = static_cast<int>(bytes);
    return true;
  }
  bool badIndex(int* index) const {
    *index = badIndex_;
    return badIndex_ != kNoBadIndex;
  }
  bool overflowed() const { return overflowIndex_ >= 0; }
  int overflowIndex() const { return overflowIndex_; }
  size_t overflowBytes() const { return overflowBytes_; }

 private:
  static constexpr int kNoBadIndex = INT_MIN;
  int* sizes_;
  int room_;
  int badIndex_ = kNoBadIndex;
  int overflowIndex_ = -1;
  size_t overflowBytes_ = 0;
};

namespace detail {

// ---- detection of optional members -------------------------------------------------------------------------
// Whether the class declares a member of that name in any form. `&T::member` alone misses an overload set (a const
// and a non-const getDeviceMr) and a member template, and the SDK would then export NULL or its own default without
// a word. So a class derived from T and from one with a data member of the name is probed too: naming the member
// there is ambiguous exactly when T has one (not possible for a final class, which only the first probe sees; see
// has_<member>_v below for what is done about that).
// NOLINTBEGIN(bugprone-macro-parentheses): `member` is a name being declared; (member) would not declare it.
#define NCCL_NET_SDK_DETECT(member)                                                                     \
  template <class T, class = void>                                                                      \
  struct address_##member : std::false_type {};                                                         \
  template <class T>                                                                                    \
  struct address_##member<T, std::void_t<decltype(&T::member)>> : std::true_type {};                    \
  struct name_##member {                                                                                \
    int member;                                                                                         \
  };                                                                                                    \
  template <class T>                                                                                    \
  struct probe_##member : T, name_##member {};                                                          \
  template <class T, class = void>                                                                      \
  struct ambiguous_##member : std::true_type {};                                                        \
  template <class T>                                                                                    \
  struct ambiguous_##member<T, std::void_t<decltype(&probe_##member<T>::member)>> : std::false_type {}; \
  template <class T>                                                                                    \
  inline constexpr bool declared_##member##_v =                                                         \
      std::disjunction_v<address_##member<T>,                                                           \
                         std::conjunction<std::is_class<T>, std::negation<std::is_final<T>>, ambiguous_##member<T>>>;
NCCL_NET_SDK_DETECT(regMrDmaBuf)
NCCL_NET_SDK_DETECT(iflush)
NCCL_NET_SDK_DETECT(getDeviceMr)
NCCL_NET_SDK_DETECT(irecvConsumed)
NCCL_NET_SDK_DETECT(makeVDevice)
NCCL_NET_SDK_DETECT(finalize)
NCCL_NET_SDK_DETECT(setNetAttr)
NCCL_NET_SDK_DETECT(iallgather)
NCCL_NET_SDK_DETECT(ireducescatter)
// Misspellings of optional methods: the SDK cannot tell one from an absent method and would supply its default (a
// vendor's `finalise` never ran). Names a class has no other reason to declare; each is refused, naming the right one.
NCCL_NET_SDK_DETECT(finalise)
NCCL_NET_SDK_DETECT(iFlush)
NCCL_NET_SDK_DETECT(regMrDmabuf)
NCCL_NET_SDK_DETECT(makeVdevice)
NCCL_NET_SDK_DETECT(setNetAttrs)
NCCL_NET_SDK_DETECT(getDeviceMR)
NCCL_NET_SDK_DETECT(irecvconsumed)
#undef NCCL_NET_SDK_DETECT
// NOLINTEND(bugprone-macro-parentheses)

// ---- compile-time checks of the vendor class ------------------------------------------------------------------
// A byte count that converts to size_t (or another unsigned type at least as wide) and to nothing else. The
// signature checks pass it where NCCL passes a size_t, so a method declared with the `int size` of ncclNet_v6..v8 is
// refused at compile time instead of being called through a silent narrowing conversion.
struct ExactSize {
  template <class T, std::enable_if_t<std::is_integral_v<T> && std::is_unsigned_v<T> && !std::is_same_v<T, bool> &&
                                          sizeof(T) >= sizeof(size_t),
                                      int> = 0>
  operator T() const {  // NOLINT(google-explicit-constructor): the implicit conversion is the point
    return 0;
  }
};
// An int argument (a device, a tag, a count of receives, a memory type, a file descriptor) that converts to int or a
// wider integer and to nothing narrower: a method declared with `int16_t tag` or `char dev` is refused at compile
// time; it compiled, and the SDK's call narrowed NCCL's value inside this header, where no warning reaches the vendor.
// A class of the vendor's that is built from an int (a `DevIndex` wrapping the device) takes it too, as it took the
// plain int before.
struct ExactInt {
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool> && sizeof(T) >= sizeof(int),
                                      int> = 0>
  operator T() const {  // NOLINT(google-explicit-constructor): the implicit conversion is the point
    return 0;
  }
  template <class T, std::enable_if_t<std::is_class_v<T> && std::is_constructible_v<T, int>, int> = 0>
  operator T() const {  // NOLINT(google-explicit-constructor): the implicit conversion is the point
    return T(0);
  }
};
// regMrDmaBuf's offset (NCCL's uint64_t): any integer of 64 bits, signed or not (an off_t loses nothing), and nothing
// narrower (an int offset turned 3 GiB into -1 GiB).
struct ExactOffset {
  template <class T, std::enable_if_t<std::is_integral_v<T> && sizeof(T) >= sizeof(uint64_t), int> = 0>
  operator T() const {  // NOLINT(google-explicit-constructor): the implicit conversion is the point
    return 0;
  }
};
// A pointer argument of type P that converts to P and to nothing else: passed where NCCL passes an `int*`, a `void**`
// or a struct pointer, so a method declared with `void*` there (an `irecv(.., void* data, ..)` written by analogy with
// isend, a `test(void*, void* done, ..)`) is refused at compile time; it compiled, and NCCL's `void**` was then read as
// a buffer. (`void*` parameters take NCCL's `void*` as they are.)
template <class P>
struct ExactPointer {
  template <class T, std::enable_if_t<std::is_same_v<T, P>, int> = 0>
  operator T() const {  // NOLINT(google-explicit-constructor): the implicit conversion is the point
    return nullptr;
  }
};
// The same for an array or struct the method only reads (irecv's and iflush's lists, makeVDevice's props, setNetAttr's
// attr): it also converts to the pointer to const, so a const-correct declaration is taken.
template <class P>
struct InputPointer {
  template <class T,
            std::enable_if_t<std::is_same_v<T, P> || std::is_same_v<T, std::add_const_t<std::remove_pointer_t<P>>*>,
                             int> = 0>
  operator T() const {  // NOLINT(google-explicit-constructor): the implicit conversion is the point
    return nullptr;
  }
};
template <class T>
struct TypeList {};

// callable_<member><Class, TypeList<Args...>>: Class has a `member` callable with exactly these arguments (in the
// sense above) that returns ncclResult_t.
#define NCCL_NET_SDK_DETECT_CALL(member)                                                                         \
  template <class T, class Args, class = void>                                                                   \
  struct callable_##member : std::false_type {};                                                                 \
  template <class T, class... A>                                                                                 \
  struct callable_##member<                                                                                      \
      T, TypeList<void(A...)>,                                                                                   \
      std::enable_if_t<std::is_same_v<decltype(std::declval<T&>().member(std::declval<A>()...)), ncclResult_t>>> \
      : std::true_type {};
NCCL_NET_SDK_DETECT_CALL(init)
NCCL_NET_SDK_DETECT_CALL(devices)
NCCL_NET_SDK_DETECT_CALL(getProperties)
NCCL_NET_SDK_DETECT_CALL(listen)
NCCL_NET_SDK_DETECT_CALL(connect)
NCCL_NET_SDK_DETECT_CALL(accept)
NCCL_NET_SDK_DETECT_CALL(regMr)
NCCL_NET_SDK_DETECT_CALL(regMrDmaBuf)
NCCL_NET_SDK_DETECT_CALL(deregMr)
NCCL_NET_SDK_DETECT_CALL(isend)
NCCL_NET_SDK_DETECT_CALL(irecv)
NCCL_NET_SDK_DETECT_CALL(iflush)
NCCL_NET_SDK_DETECT_CALL(test)
NCCL_NET_SDK_DETECT_CALL(closeSend)
NCCL_NET_SDK_DETECT_CALL(closeRecv)
NCCL_NET_SDK_DETECT_CALL(closeListen)
NCCL_NET_SDK_DETECT_CALL(getDeviceMr)
NCCL_NET_SDK_DETECT_CALL(irecvConsumed)
NCCL_NET_SDK_DETECT_CALL(makeVDevice)
NCCL_NET_SDK_DETECT_CALL(finalize)
NCCL_NET_SDK_DETECT_CALL(setNetAttr)
// ncclCollNet's own (collnet.hpp)
NCCL_NET_SDK_DETECT_CALL(reduceSupport)
NCCL_NET_SDK_DETECT_CALL(iallreduce)
NCCL_NET_SDK_DETECT_CALL(iallgather)
NCCL_NET_SDK_DETECT_CALL(ireducescatter)
NCCL_NET_SDK_DETECT_CALL(closeColl)
#undef NCCL_NET_SDK_DETECT_CALL

// has_<member>_v: the class has that optional member, in any form. declared_<member>_v misses an overload set or a
// member template in a final class (no probe can derive from it), which was then exported as NULL without a word; a
// member callable with NCCL's own arguments (ncclNet's or ncclCollNet's, v12) counts too. A final class whose
// overloads all take other arguments stays unseen: nothing can look into it.
template <class T>
inline constexpr bool has_regMrDmaBuf_v =
    declared_regMrDmaBuf_v<T> ||
    callable_regMrDmaBuf<T, TypeList<void(void*, void*, size_t, int, uint64_t, int, void**)>>::value;
template <class T>
inline constexpr bool has_iflush_v =
    declared_iflush_v<T> || callable_iflush<T, TypeList<void(void*, int, void**, int*, void**, void**)>>::value ||
    callable_iflush<T, TypeList<void(void*, void*, int, void*, void**)>>::value;
template <class T>
inline constexpr bool has_getDeviceMr_v =
    declared_getDeviceMr_v<T> || callable_getDeviceMr<T, TypeList<void(void*, void*, void**)>>::value;
template <class T>
inline constexpr bool has_irecvConsumed_v =
    declared_irecvConsumed_v<T> || callable_irecvConsumed<T, TypeList<void(void*, int, void*)>>::value;
template <class T>
inline constexpr bool has_makeVDevice_v =
    declared_makeVDevice_v<T> || callable_makeVDevice<T, TypeList<void(int*, ncclNetVDeviceProps_v12_t*)>>::value;
template <class T>
inline constexpr bool has_finalize_v = declared_finalize_v<T> || callable_finalize<T, TypeList<void(void*)>>::value;
template <class T>
inline constexpr bool has_setNetAttr_v =
    declared_setNetAttr_v<T> || callable_setNetAttr<T, TypeList<void(void*, ncclNetAttr_v12_t*)>>::value;
template <class T>
inline constexpr bool has_iallgather_v =
    declared_iallgather_v<T> ||
    callable_iallgather<
        T, TypeList<void(void*, void*, int, ncclNetSGE_v12_t*, size_t, size_t, size_t, void*, void**)>>::value;
template <class T>
inline constexpr bool has_ireducescatter_v =
    declared_ireducescatter_v<T> ||
    callable_ireducescatter<T, TypeList<void(void*, int, ncclNetSGE_v12_t*, void*, size_t, size_t, size_t,
                                             ncclDataType_t, ncclRedOp_t, void*, void**)>>::value;

template <class T, class = void>
struct has_kName : std::false_type {};
template <class T>
struct has_kName<T, std::void_t<decltype(T::kName)>> : std::true_type {};
// kName as the tables need it: a static constant string. Static first (std::conjunction stops there), as GCC makes
// a non-static member named in a constant expression a hard error rather than a substitution failure.
template <class T, class = void>
struct has_static_kName : std::false_type {};
template <class T>
struct has_static_kName<T, std::void_t<decltype(&T::kName)>>
    : std::bool_constant<!std::is_member_pointer_v<decltype(&T::kName)>> {};
template <class T, class = void>
struct has_constant_kName_ : std::false_type {};
template <class T>
struct has_constant_kName_<T, std::void_t<std::integral_constant<char, T::kName[0]>>>
    : std::is_convertible<decltype((T::kName)), const char*> {};
template <class T>
struct has_constant_kName : std::conjunction<has_static_kName<T>, has_constant_kName_<T>> {};
template <class T>
constexpr bool nameIsEmpty() {
  if constexpr (has_constant_kName<T>::value) {
    return T::kName[0] == '\0';
  } else {
    return false;
  }
}

// No misspelt optional method (see the detectors above): those of ncclNet for a net class (kNet), those a collNet has
// too for a collNet class. A member meant by such a name (a base class's `finalise`, an enumerator `iFlush`) is let
// through by defining NCCL_NET_SDK_NO_SPELLING_CHECK before the SDK is included.
#ifdef NCCL_NET_SDK_NO_SPELLING_CHECK
inline constexpr bool kCheckSpelling = false;
#else
inline constexpr bool kCheckSpelling = true;
#endif
template <class T, bool kNet>
struct SpelledRight {
  static constexpr bool kFinalise = !kCheckSpelling || !declared_finalise_v<T>;
  static constexpr bool kIFlush = !kCheckSpelling || !declared_iFlush_v<T>;
  static constexpr bool kRegMrDmabuf = !kCheckSpelling || !declared_regMrDmabuf_v<T>;
  static constexpr bool kMakeVdevice = !kCheckSpelling || !declared_makeVdevice_v<T>;
  static constexpr bool kSetNetAttrs = !kCheckSpelling || !kNet || !declared_setNetAttrs_v<T>;
  static constexpr bool kGetDeviceMR = !kCheckSpelling || !kNet || !declared_getDeviceMR_v<T>;
  static constexpr bool kIrecvconsumed = !kCheckSpelling || !kNet || !declared_irecvconsumed_v<T>;
  static constexpr bool value =
      kFinalise && kIFlush && kRegMrDmabuf && kMakeVdevice && kSetNetAttrs && kGetDeviceMR && kIrecvconsumed;
};
#define NCCL_NET_SDK_SPELLING(wrong, right, effect)                                                            \
  "NCCL_NET_SDK: the class declares " wrong ", which nothing calls: the optional method is " right " (" effect \
  "); if the member is meant by that name, define NCCL_NET_SDK_NO_SPELLING_CHECK before including the SDK"
// One static_assert per misspelling (reportNetClass and reportCollClass call it).
template <class T, bool kNet>
constexpr void reportSpelling() {
  using M = SpelledRight<T, kNet>;
  static_assert(M::kFinalise, NCCL_NET_SDK_SPELLING("finalise", "finalize", "the SDK would run its own default"));
  static_assert(M::kIFlush, NCCL_NET_SDK_SPELLING("iFlush", "iflush", "the SDK would report NULL: no flush"));
  static_assert(M::kRegMrDmabuf,
                NCCL_NET_SDK_SPELLING("regMrDmabuf", "regMrDmaBuf", "the SDK would report NULL: no DMA-BUF"));
  static_assert(M::kMakeVdevice,
                NCCL_NET_SDK_SPELLING("makeVdevice", "makeVDevice", "the SDK would report NULL: no NIC fusion"));
  static_assert(M::kSetNetAttrs,
                NCCL_NET_SDK_SPELLING("setNetAttrs", "setNetAttr", "the SDK would report NULL: attributes unheard"));
  static_assert(M::kGetDeviceMR,
                NCCL_NET_SDK_SPELLING("getDeviceMR", "getDeviceMr", "the SDK would report NULL: no device handle"));
  static_assert(M::kIrecvconsumed, NCCL_NET_SDK_SPELLING("irecvconsumed", "irecvConsumed",
                                                         "the SDK would report NULL: consumption unheard"));
}
#undef NCCL_NET_SDK_SPELLING

// Each requirement of NCCL_NET_SDK_EXPORT(Net) as a named constant, so that one mistake gives one error naming the
// method and its expected signature (the static_asserts below), not a page of template instantiation context.
template <class Net>
struct NetClassCheck {
  using S = ExactSize;
  using I = ExactInt;
  static constexpr bool kNamed = has_kName<Net>::value;
  static constexpr bool kNameConstant = !kNamed || has_constant_kName<Net>::value;
  static constexpr bool kNameNonEmpty = !nameIsEmpty<Net>();
  static constexpr bool kConstructible = std::is_default_constructible_v<Net>;
  static constexpr bool kInit = callable_init<Net, TypeList<void(const InitArgs&, ExactPointer<void**>)>>::value;
  static constexpr bool kDevices = callable_devices<Net, TypeList<void(ExactPointer<int*>)>>::value;
  static constexpr bool kGetProperties =
      callable_getProperties<Net, TypeList<void(I, ExactPointer<ncclNetProperties_v12_t*>)>>::value;
  static constexpr bool kListen = callable_listen<Net, TypeList<void(void*, I, void*, ExactPointer<void**>)>>::value;
  static constexpr bool kConnect = callable_connect<
      Net, TypeList<void(void*, I, void*, ExactPointer<void**>, ExactPointer<ncclNetDeviceHandle_v12_t**>)>>::value;
  static constexpr bool kAccept =
      callable_accept<Net,
                      TypeList<void(void*, ExactPointer<void**>, ExactPointer<ncclNetDeviceHandle_v12_t**>)>>::value;
  static constexpr bool kRegMr = callable_regMr<Net, TypeList<void(void*, void*, S, I, ExactPointer<void**>)>>::value;
  static constexpr bool kDeregMr = callable_deregMr<Net, TypeList<void(void*, void*)>>::value;
  static constexpr bool kIsend =
      callable_isend<Net, TypeList<void(void*, void*, S, I, void*, void*, ExactPointer<void**>)>>::value;
  static constexpr bool kIrecv =
      callable_irecv<Net, TypeList<void(void*, I, InputPointer<void**>, InputPointer<size_t*>, InputPointer<int*>,
                                        InputPointer<void**>, InputPointer<void**>, ExactPointer<void**>)>>::value;
  static constexpr bool kTest = callable_test<Net, TypeList<void(void*, ExactPointer<int*>, CompletedSizes&)>>::value;
  static constexpr bool kCloseSend = callable_closeSend<Net, TypeList<void(void*)>>::value;
  static constexpr bool kCloseRecv = callable_closeRecv<Net, TypeList<void(void*)>>::value;
  static constexpr bool kCloseListen = callable_closeListen<Net, TypeList<void(void*)>>::value;
  // Optional methods: checked only when the class declares one.
  static constexpr bool kRegMrDmaBuf =
      !has_regMrDmaBuf_v<Net> ||
      callable_regMrDmaBuf<Net, TypeList<void(void*, void*, S, I, ExactOffset, I, ExactPointer<void**>)>>::value;
  static constexpr bool kIflush =
      !has_iflush_v<Net> || callable_iflush<Net, TypeList<void(void*, I, InputPointer<void**>, InputPointer<int*>,
                                                               InputPointer<void**>, ExactPointer<void**>)>>::value;
  static constexpr bool kGetDeviceMr =
      !has_getDeviceMr_v<Net> || callable_getDeviceMr<Net, TypeList<void(void*, void*, ExactPointer<void**>)>>::value;
  static constexpr bool kIrecvConsumed =
      !has_irecvConsumed_v<Net> || callable_irecvConsumed<Net, TypeList<void(void*, I, void*)>>::value;
  static constexpr bool kMakeVDevice =
      !has_makeVDevice_v<Net> ||
      callable_makeVDevice<Net, TypeList<void(ExactPointer<int*>, InputPointer<ncclNetVDeviceProps_v12_t*>)>>::value;
  static constexpr bool kFinalize = !has_finalize_v<Net> || callable_finalize<Net, TypeList<void(void*)>>::value;
  static constexpr bool kSetNetAttr =
      !has_setNetAttr_v<Net> ||
      callable_setNetAttr<Net, TypeList<void(void*, InputPointer<ncclNetAttr_v12_t*>)>>::value;

  static constexpr bool kSpelled = SpelledRight<Net, true>::value;

  static constexpr bool value = kNamed && kNameConstant && kNameNonEmpty && kConstructible && kInit && kDevices &&
                                kGetProperties && kListen && kConnect && kAccept && kRegMr && kDeregMr && kIsend &&
                                kIrecv && kTest && kCloseSend && kCloseRecv && kCloseListen && kRegMrDmaBuf &&
                                kIflush && kGetDeviceMr && kIrecvConsumed && kMakeVDevice && kFinalize && kSetNetAttr &&
                                kSpelled;
};

// Stands in for a vendor class that failed NetClassCheck, so the tables still instantiate and the compiler reports
// only the static_asserts that name the mistake. Never exported: the build has already failed.
struct InvalidNet {
  static constexpr const char kName[] = "invalid";
  ncclResult_t init(const InitArgs&, void**) { return ncclInternalError; }
  ncclResult_t devices(int*) { return ncclInternalError; }
  ncclResult_t getProperties(int, ncclNetProperties_v12_t*) { return ncclInternalError; }
  ncclResult_t listen(void*, int, void*, void**) { return ncclInternalError; }
  ncclResult_t connect(void*, int, void*, void**, ncclNetDeviceHandle_v12_t**) { return ncclInternalError; }
  ncclResult_t accept(void*, void**, ncclNetDeviceHandle_v12_t**) { return ncclInternalError; }
  ncclResult_t regMr(void*, void*, size_t, int, void**) { return ncclInternalError; }
  ncclResult_t deregMr(void*, void*) { return ncclInternalError; }
  ncclResult_t isend(void*, void*, size_t, int, void*, void*, void**) { return ncclInternalError; }
  ncclResult_t irecv(void*, int, void**, size_t*, int*, void**, void**, void**) { return ncclInternalError; }
  ncclResult_t test(void*, int*, CompletedSizes&) { return ncclInternalError; }
  ncclResult_t closeSend(void*) { return ncclInternalError; }
  ncclResult_t closeRecv(void*) { return ncclInternalError; }
  ncclResult_t closeListen(void*) { return ncclInternalError; }
};

// One static_assert per requirement Net misses; returns whether it meets them all. (A function rather than a class,
// so that a failed assertion does not also make the class unusable and add errors of its own under clang.)
template <class Net>
constexpr bool reportNetClass() {
  using C = NetClassCheck<Net>;
  static_assert(
      C::kNamed,
      "NCCL_NET_SDK_EXPORT: Net has no public kName: add `static constexpr const char kName[] = \"yourname\";` "
      "(what users put in NCCL_NET=)");
  static_assert(C::kNameConstant,
                "NCCL_NET_SDK_EXPORT: Net::kName is not a static constant string: declare it `static constexpr const "
                "char kName[] = \"yourname\";` (the exported tables point to it)");
  static_assert(C::kNameNonEmpty, "NCCL_NET_SDK_EXPORT: Net::kName is empty: NCCL_NET= selects a plugin by this name");
  static_assert(C::kConstructible,
                "NCCL_NET_SDK_EXPORT: Net is not default-constructible: the SDK makes the one instance on first use; "
                "read settings in init, not in a constructor with arguments");
  static_assert(
      C::kInit,
      "NCCL_NET_SDK_EXPORT: Net has no public init(const nccl_net::sdk::InitArgs& args, void** ctx) returning "
      "ncclResult_t (the SDK's init for every ABI version; not the raw ncclNet_vN init)");
  static_assert(C::kDevices, "NCCL_NET_SDK_EXPORT: Net has no public devices(int* ndev) returning ncclResult_t");
  static_assert(
      C::kGetProperties,
      "NCCL_NET_SDK_EXPORT: Net has no public getProperties(int dev, ncclNetProperties_v12_t* props) returning "
      "ncclResult_t (the v12 struct: the SDK converts it for older versions)");
  static_assert(C::kListen,
                "NCCL_NET_SDK_EXPORT: Net has no public listen(void* ctx, int dev, void* handle, void** listenComm) "
                "returning ncclResult_t");
  static_assert(C::kConnect,
                "NCCL_NET_SDK_EXPORT: Net has no public connect(void* ctx, int dev, void* handle, void** sendComm, "
                "ncclNetDeviceHandle_v12_t** sendDevComm) returning ncclResult_t");
  static_assert(C::kAccept,
                "NCCL_NET_SDK_EXPORT: Net has no public accept(void* listenComm, void** recvComm, "
                "ncclNetDeviceHandle_v12_t** recvDevComm) returning ncclResult_t");
  static_assert(
      C::kRegMr,
      "NCCL_NET_SDK_EXPORT: Net has no public regMr(void* comm, void* data, size_t size, int type, void** mhandle) "
      "returning ncclResult_t (size is size_t: an int would truncate registrations of 2 GiB and more)");
  static_assert(C::kDeregMr,
                "NCCL_NET_SDK_EXPORT: Net has no public deregMr(void* comm, void* mhandle) returning ncclResult_t");
  static_assert(
      C::kIsend,
      "NCCL_NET_SDK_EXPORT: Net has no public isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, "
      "void* phandle, void** request) returning ncclResult_t (size is size_t: an int would truncate "
      "messages of 2 GiB and more; int parameters take an int or a wider integer, not a narrower one)");
  static_assert(
      C::kIrecv,
      "NCCL_NET_SDK_EXPORT: Net has no public irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, "
      "void** mhandles, void** phandles, void** request) returning ncclResult_t");
  static_assert(
      C::kTest,
      "NCCL_NET_SDK_EXPORT: Net has no public test(void* request, int* done, nccl_net::sdk::CompletedSizes& sizes) "
      "returning ncclResult_t (report sizes with sizes.set(i, bytes), not through int*)");
  static_assert(C::kCloseSend,
                "NCCL_NET_SDK_EXPORT: Net has no public closeSend(void* sendComm) returning ncclResult_t");
  static_assert(C::kCloseRecv,
                "NCCL_NET_SDK_EXPORT: Net has no public closeRecv(void* recvComm) returning ncclResult_t");
  static_assert(C::kCloseListen,
                "NCCL_NET_SDK_EXPORT: Net has no public closeListen(void* listenComm) returning ncclResult_t");
  static_assert(
      C::kRegMrDmaBuf,
      "NCCL_NET_SDK_EXPORT: Net::regMrDmaBuf is not a public regMrDmaBuf(void* comm, void* data, size_t size, int "
      "type, uint64_t offset, int fd, void** mhandle) returning ncclResult_t");
  static_assert(
      C::kIflush,
      "NCCL_NET_SDK_EXPORT: Net::iflush is not a public iflush(void* recvComm, int n, void** data, int* sizes, void** "
      "mhandles, void** request) returning ncclResult_t (sizes are int* here, unlike irecv's)");
  static_assert(C::kGetDeviceMr,
                "NCCL_NET_SDK_EXPORT: Net::getDeviceMr is not a public getDeviceMr(void* comm, void* mhandle, void** "
                "dptrMhandle) returning ncclResult_t");
  static_assert(
      C::kIrecvConsumed,
      "NCCL_NET_SDK_EXPORT: Net::irecvConsumed is not a public irecvConsumed(void* recvComm, int n, void* request) "
      "returning ncclResult_t");
  static_assert(
      C::kMakeVDevice,
      "NCCL_NET_SDK_EXPORT: Net::makeVDevice is not a public makeVDevice(int* d, ncclNetVDeviceProps_v12_t* props) "
      "returning ncclResult_t");
  static_assert(C::kFinalize,
                "NCCL_NET_SDK_EXPORT: Net::finalize is not a public finalize(void* ctx) returning ncclResult_t");
  static_assert(
      C::kSetNetAttr,
      "NCCL_NET_SDK_EXPORT: Net::setNetAttr is not a public setNetAttr(void* ctx, ncclNetAttr_v12_t* attr) returning "
      "ncclResult_t");
  reportSpelling<Net, true>();
  return C::value;
}
// The class NCCL_NET_SDK_EXPORT builds tables for: Net itself, or InvalidNet after the assertions named its mistakes.
template <class Net>
using CheckedNet = std::conditional_t<reportNetClass<Net>(), Net, InvalidNet>;

// ---- the exception boundary ----------------------------------------------------------------------------------
// Set as the plugin's library is unloaded (dlclose) or the process exits, before the vendor's objects are
// destroyed: a call that comes later (a host's own static tearing down a communicator during exit, a proxy thread
// still running) is refused by name instead of running on a destroyed object. Never destroyed itself.
inline std::atomic<bool>& pluginUnloaded() {
  static std::atomic<bool> unloaded{false};
  return unloaded;
}

template <class F>
ncclResult_t guard(const char* function, F&& body) noexcept {
  if (pluginUnloaded().load(std::memory_order_acquire)) {
    NCCL_NET_WARN("%s: called after the plugin was unloaded (dlclose, or the process is exiting)", function);
    return ncclInvalidUsage;
  }
  try {
    return body();
  } catch (const std::bad_alloc&) {
    NCCL_NET_WARN("%s: out of memory", function);
    return ncclSystemError;
  } catch (const std::exception& e) {
    NCCL_NET_WARN("%s: unexpected exception: %s", function, e.what());
    return ncclInternalError;
  } catch (...) {
    NCCL_NET_WARN("%s: unexpected non-standard exception", function);
    return ncclInternalError;
  }
}

#define NCCL_NET_SDK_REQUIRE(cond, result, ...) \
  do {                                          \
    if (!(cond)) {                              \
      NCCL_NET_WARN(__VA_ARGS__);               \
      return (result);                          \
    }                                           \
  } while (0)

// Defaults the SDK puts in a properties struct before the vendor fills it, so a field the vendor forgets is
// something NCCL accepts rather than garbage.
inline void defaultProperties(int dev, ncclNetProperties_v12_t* props) {
  std::memset(props, 0, sizeof(*props));
  // Each device a card of its own, as NCCL's socket transport says (guid = device index): NCCL counts devices of one
  // guid and port as one NIC's bandwidth, so a guid of 0 for all made a multi-NIC plugin look like one NIC. A vendor
  // gives the ports of one card that card's guid (and their port numbers).
  props->guid = static_cast<uint64_t>(dev);
  props->ptrSupport = NCCL_PTR_HOST;
  props->speed = 10000;
  props->maxComms = 65536;
  props->maxRecvs = 1;
  props->netDeviceType = NCCL_NET_DEVICE_HOST;
  props->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  // NCCL's own ceilings for plugins that do not say (MAX_NET_SIZE, MAX_COLLNET_SIZE): test() reports sizes as int in
  // every version, so a message above INT_MAX could never complete (isend refuses it), and NCCL cuts its transfers
  // at maxP2pBytes. A vendor may raise them up to INT_MAX.
  props->maxP2pBytes = NCCL_NET_DEFAULT_MAX_P2P_BYTES;
  props->maxCollBytes = NCCL_NET_DEFAULT_MAX_COLL_BYTES;
  props->maxMultiRequestSize = 1;
  props->railId = NCCL_NET_ID_UNDEF;
  props->planeId = NCCL_NET_ID_UNDEF;
}

// Copies the newest properties into an older version's struct, field by field where the version has it. (v12's own
// struct is the newest: getProperties hands it out as it is.)
template <int V, class Props>
ncclResult_t downgradeProperties(const ncclNetProperties_v12_t& in, Props* out) {
  static_assert(V >= 6 && V < 12, "only an older version's properties are downgraded");
  std::memset(out, 0, sizeof(*out));
  out->name = in.name;
  out->pciPath = in.pciPath;
  out->guid = in.guid;
  out->ptrSupport = in.ptrSupport;
  out->speed = in.speed;
  out->port = in.port;
  out->latency = in.latency;
  out->maxComms = in.maxComms;
  out->maxRecvs = in.maxRecvs;
  if constexpr (V >= 7) {
    out->netDeviceType = in.netDeviceType;
    out->netDeviceVersion = in.netDeviceVersion;
  } else {
    // ncclNet_v6 has no device type: its hosts (NCCL 2.13-2.18) take every device as HOST and would read an UNPACK
    // device's receives, which land in bounce buffers for NCCL's kernels to finish, as complete in place.
    NCCL_NET_SDK_REQUIRE(in.netDeviceType == NCCL_NET_DEVICE_HOST, ncclInternalError,
                         "device %s has netDeviceType %d; ncclNet_v%d has no device type, and its hosts would take "
                         "it as a HOST device",
                         in.name, static_cast<int>(in.netDeviceType), V);
  }
  if constexpr (V >= 8) out->regIsGlobal = in.regIsGlobal;
  if constexpr (V >= 9) {
    constexpr int kMaxDevs = static_cast<int>(std::size(decltype(out->vProps.devs){}));
    NCCL_NET_SDK_REQUIRE(in.vProps.ndevs >= 0 && in.vProps.ndevs <= kMaxDevs, ncclInternalError,
                         "device %s fuses %d physical devices; ncclNet_v%d carries at most %d", in.name,
                         in.vProps.ndevs, V, kMaxDevs);
    out->forceFlush = in.forceFlush;
    out->vProps.ndevs = in.vProps.ndevs;
    for (int i = 0; i < in.vProps.ndevs; ++i) out->vProps.devs[i] = in.vProps.devs[i];
    out->maxP2pBytes = in.maxP2pBytes;
    out->maxCollBytes = in.maxCollBytes;
  }
  if constexpr (V >= 11) out->maxMultiRequestSize = in.maxMultiRequestSize;
  return ncclSuccess;
}

// ---- one process-wide instance of the vendor class, plus contexts for hosts older than v11 ----------------------
template <class Net>
struct NetState {
  static Net& instance() {
    static Net net;
    static UnloadHook hook;  // made after `net`, so it runs before `net` is destroyed
    return net;
  }

  // Hosts before v11 call init once and pass no ctx to listen/connect; v10 passes a config per connect. Keep one
  // vendor ctx per traffic class seen, created on first use with that class. These hosts have no finalize: NCCL
  // dlcloses the plugin when its last communicator is destroyed, so the contexts made for them are finalized then
  // (at unload, or at exit if the library is never closed), by UnloadHook.
  struct LegacyContext {
    int trafficClass;
    void* ctx;
  };
  static constexpr int kMaxLegacyContexts = 8;
  static std::mutex& legacyMutex() {
    static std::mutex m;
    return m;
  }
  static LegacyContext* legacyContexts() {
    static LegacyContext contexts[kMaxLegacyContexts];
    return contexts;
  }
  static int& legacyCount() {
    static int count = 0;
    return count;
  }
  static int& legacyVersion() {
    static int version = 0;
    return version;
  }
  static ncclProfilerCallback_t& legacyProfiler() {
    static ncclProfilerCallback_t profiler = nullptr;
    return profiler;
  }

  static ncclResult_t legacyInit(int version, ncclDebugLogger_t logger, ncclProfilerCallback_t profiler) {
    setLogger(logger);
    std::lock_guard<std::mutex> lock(legacyMutex());
    legacyVersion() = version;
    legacyProfiler() = profiler;
    if (legacyCount() > 0) return ncclSuccess;  // init is once per process for these versions
    return createLegacyContextLocked(NCCL_NET_TRAFFIC_CLASS_UNDEF, nullptr);
  }

  static ncclResult_t createLegacyContextLocked(int trafficClass, void** ctxOut) {
    NCCL_NET_SDK_REQUIRE(legacyCount() < kMaxLegacyContexts, ncclInternalError,
                         "more than %d distinct traffic classes requested through ncclNet_v10 connect",
                         kMaxLegacyContexts);
    InitArgs args;
    args.abiVersion = legacyVersion();
    args.trafficClass = trafficClass;
    args.profiler = legacyProfiler();
    void* ctx = nullptr;
    NCCL_NET_CHECK(instance().init(args, &ctx));
    legacyContexts()[legacyCount()++] = LegacyContext{trafficClass, ctx};
    if (ctxOut != nullptr) *ctxOut = ctx;
    return ncclSuccess;
  }

  struct UnloadHook {
    UnloadHook() = default;
    UnloadHook(const UnloadHook&) = delete;
    UnloadHook& operator=(const UnloadHook&) = delete;
    ~UnloadHook() {
      pluginUnloaded().store(true, std::memory_order_release);
      finalizeLegacyContexts();
    }
  };
  static void finalizeLegacyContexts() noexcept {
    std::lock_guard<std::mutex> lock(legacyMutex());
    if constexpr (has_finalize_v<Net>) {
      if (legacyCount() > 0)
        NCCL_NET_INFO(NCCL_NET | NCCL_INIT,
                      "unloading: finalizing %d context(s) made for ncclNet_v%d, which has no finalize", legacyCount(),
                      legacyVersion());
      for (int i = 0; i < legacyCount(); ++i) {
        try {
          if (ncclResult_t result = instance().finalize(legacyContexts()[i].ctx); result != ncclSuccess)
            NCCL_NET_WARN("unloading: finalize of the context for traffic class %d returned %d",
                          legacyContexts()[i].trafficClass, static_cast<int>(result));
        } catch (...) {
          NCCL_NET_WARN("unloading: finalize of the context for traffic class %d threw",
                        legacyContexts()[i].trafficClass);
        }
      }
    }
    legacyCount() = 0;
  }

  static ncclResult_t legacyContext(int trafficClass, void** ctx) {
    std::lock_guard<std::mutex> lock(legacyMutex());
    NCCL_NET_SDK_REQUIRE(legacyCount() > 0, ncclInternalError, "called before init");
    for (int i = 0; i < legacyCount(); ++i) {
      if (legacyContexts()[i].trafficClass == trafficClass) {
        *ctx = legacyContexts()[i].ctx;
        return ncclSuccess;
      }
    }
    return createLegacyContextLocked(trafficClass, ctx);
  }
};

// ---- shared argument conversions --------------------------------------------------------------------------------
inline ncclResult_t intSizeToSize(const char* function, int size, size_t* out) {
  NCCL_NET_SDK_REQUIRE(size >= 0, ncclInternalError,
                       "%s: size %d is negative: a size above 2 GiB cannot pass through this int-sized ABI version",
                       function, size);
  *out = static_cast<size_t>(size);
  return ncclSuccess;
}

// How many devices the plugin last said it has. Every call that names a device is checked against it, on the
// host's proxy threads, while NCCL calls devices() only on its init path under its plugin lock: so the plugin's
// devices() is asked again only for an index beyond what it last said (a virtual device made since, or a bad index).
template <class Net>
std::atomic<int>& knownDevices() {
  static std::atomic<int> count{0};
  return count;
}
template <class Net>
ncclResult_t checkDevice(const char* function, int dev) {
  if (dev >= 0 && dev < knownDevices<Net>().load(std::memory_order_acquire)) return ncclSuccess;
  int ndev = 0;
  NCCL_NET_CHECK(NetState<Net>::instance().devices(&ndev));
  knownDevices<Net>().store(ndev, std::memory_order_release);
  NCCL_NET_SDK_REQUIRE(dev >= 0 && dev < ndev, ncclInternalError, "%s: device %d out of range [0, %d)", function, dev,
                       ndev);
  return ncclSuccess;
}

// The host's token for a ctx the vendor's init just returned. Without one (out of memory: the exception goes on to the
// entry's guard) the host gets an error and never finalizes that ctx, so it is finalized here.
template <class Vendor>
void* contextToken(Vendor& vendor, void* own) {
  try {
    return ContextTokens::instance().make(vendorTag<Vendor>(), own);
  } catch (...) {
    if constexpr (has_finalize_v<Vendor>) (void)vendor.finalize(own);
    throw;
  }
}

// The plugin's own ctx for a ctx from the host (see detail::ContextTokens): what init returned, or a clear error.
inline ncclResult_t resolveContext(const char* function, const void* vendor, void* ctx, void** own) {
  const ContextTokens::Lookup found = ContextTokens::instance().find(vendor, ctx, own);
  NCCL_NET_SDK_REQUIRE(found != ContextTokens::Lookup::kFinalized, ncclInvalidUsage,
                       "%s: ctx %p was finalized already (each init's ctx is finalized once, and not used after)",
                       function, ctx);
  NCCL_NET_SDK_REQUIRE(found != ContextTokens::Lookup::kUnknown, ncclInternalError,
                       "%s: ctx %p is not one this plugin's init returned", function, ctx);
  return ncclSuccess;
}

// ---- the entry points, one template per call; V is the ABI version the host called through ----------------------
template <class Net>
struct NetEntry {
  static Net& net() { return NetState<Net>::instance(); }

  static ncclResult_t initV11(int version, void** ctx, uint64_t commId, const ncclNetCommConfig_v12_t* config,
                              ncclDebugLogger_t logger, ncclProfilerCallback_t profiler) {
    return guard("init", [&] {
      setLogger(logger);
      NCCL_NET_SDK_REQUIRE(ctx != nullptr, ncclInternalError, "init: ctx out-pointer is NULL");
      InitArgs args;
      args.abiVersion = version;
      args.commId = commId;
      args.trafficClass = config != nullptr ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
      args.profiler = profiler;
      *ctx = nullptr;
      void* own = nullptr;
      NCCL_NET_CHECK(net().init(args, &own));
      *ctx = contextToken(net(), own);  // the host holds a token per init
      return ncclSuccess;
    });
  }
  static ncclResult_t initLegacy(int version, ncclDebugLogger_t logger, ncclProfilerCallback_t profiler) {
    return guard("init", [&] { return NetState<Net>::legacyInit(version, logger, profiler); });
  }

  static ncclResult_t devices(int* ndev) {
    return guard("devices", [&] {
      NCCL_NET_SDK_REQUIRE(ndev != nullptr, ncclInternalError, "devices: ndev is NULL");
      NCCL_NET_CHECK(net().devices(ndev));
      knownDevices<Net>().store(*ndev, std::memory_order_release);
      return ncclSuccess;
    });
  }

  static ncclResult_t properties(int dev, ncclNetProperties_v12_t* props) {
    NCCL_NET_SDK_REQUIRE(props != nullptr, ncclInternalError, "getProperties: props is NULL");
    NCCL_NET_CHECK(checkDevice<Net>("getProperties", dev));
    defaultProperties(dev, props);
    NCCL_NET_CHECK(net().getProperties(dev, props));
    NCCL_NET_SDK_REQUIRE(props->name != nullptr, ncclInternalError,
                         "getProperties: device %d has no name (NCCL keys its NICs by name)", dev);
    NCCL_NET_SDK_REQUIRE(props->maxP2pBytes > 0 && props->maxP2pBytes <= NCCL_MAX_NET_SIZE_BYTES, ncclInternalError,
                         "getProperties: device %d reports maxP2pBytes %zu outside (0, 1 TiB]", dev,
                         props->maxP2pBytes);
    NCCL_NET_SDK_REQUIRE(props->maxCollBytes > 0 && props->maxCollBytes <= NCCL_MAX_NET_SIZE_BYTES, ncclInternalError,
                         "getProperties: device %d reports maxCollBytes %zu outside (0, 1 TiB]", dev,
                         props->maxCollBytes);
    // NCCL reads vProps.devs[0 .. ndevs) (a physical device lists itself, a vNIC its members): a count outside the
    // array would have it read the fields after it as devices.
    NCCL_NET_SDK_REQUIRE(props->vProps.ndevs >= 1 && props->vProps.ndevs <= NCCL_NET_MAX_DEVS_PER_NIC_V12,
                         ncclInternalError,
                         "getProperties: device %d lists %d physical devices in vProps; a device lists 1 to %d", dev,
                         props->vProps.ndevs, NCCL_NET_MAX_DEVS_PER_NIC_V12);
    // A limit above what test() can report (its sizes are int) is one the SDK's isend would refuse: NCCL would post
    // a message that fails. Cut to NCCL's own default, with a word in the log.
    for (size_t* limit : {&props->maxP2pBytes, &props->maxCollBytes}) {
      if (*limit <= static_cast<size_t>(INT_MAX)) continue;
      const size_t cut =
          limit == &props->maxP2pBytes ? NCCL_NET_DEFAULT_MAX_P2P_BYTES : NCCL_NET_DEFAULT_MAX_COLL_BYTES;
      NCCL_NET_INFO(NCCL_NET,
                    "getProperties: device %d: %s %zu is above INT_MAX, which test() cannot report; using %zu", dev,
                    limit == &props->maxP2pBytes ? "maxP2pBytes" : "maxCollBytes", *limit, cut);
      *limit = cut;
    }
    if constexpr (!has_iflush_v<Net>) {
      NCCL_NET_SDK_REQUIRE((props->ptrSupport & (NCCL_PTR_CUDA | NCCL_PTR_DMABUF)) == 0, ncclInternalError,
                           "getProperties: device %d supports GPU memory but the plugin has no iflush", dev);
    }
    // The exported regMrDmaBuf is never NULL (the SDK's refuses), so NCCL cannot tell from the table: a device saying
    // DMABUF would have NCCL register through it at connect time and fail the connection.
    if constexpr (!has_regMrDmaBuf_v<Net>) {
      NCCL_NET_SDK_REQUIRE((props->ptrSupport & NCCL_PTR_DMABUF) == 0, ncclInternalError,
                           "getProperties: device %d says NCCL_PTR_DMABUF but the plugin has no regMrDmaBuf", dev);
    }
    return ncclSuccess;
  }
  template <int V, class Props>
  static ncclResult_t getProperties(int dev, Props* props) {
    return guard("getProperties", [&] {
      if constexpr (V == 12) {
        return properties(dev, props);
      } else {
        NCCL_NET_SDK_REQUIRE(props != nullptr, ncclInternalError, "getProperties: props is NULL");
        ncclNetProperties_v12_t newest;
        NCCL_NET_CHECK(properties(dev, &newest));
        return downgradeProperties<V>(newest, props);
      }
    });
  }

  // `ctx` is the host's (v11+: a token, see ContextTokens); `own` is the plugin's.
  static ncclResult_t listenCtx(void* ctx, int dev, void* handle, void** listenComm) {
    void* own = nullptr;
    NCCL_NET_CHECK(guard("listen", [&] { return resolveContext("listen", vendorTag<Net>(), ctx, &own); }));
    return listenOwn(own, dev, handle, listenComm);
  }
  static ncclResult_t listenLegacy(int dev, void* handle, void** listenComm) {
    void* own = nullptr;
    NCCL_NET_CHECK(guard("listen", [&] { return NetState<Net>::legacyContext(NCCL_NET_TRAFFIC_CLASS_UNDEF, &own); }));
    return listenOwn(own, dev, handle, listenComm);
  }
  static ncclResult_t listenOwn(void* own, int dev, void* handle, void** listenComm) {
    return guard("listen", [&] {
      NCCL_NET_SDK_REQUIRE(handle != nullptr && listenComm != nullptr, ncclInternalError,
                           "listen: handle or listenComm is NULL");
      NCCL_NET_CHECK(checkDevice<Net>("listen", dev));
      *listenComm = nullptr;
      return net().listen(own, dev, handle, listenComm);
    });
  }

  static ncclResult_t connectCtx(void* ctx, int dev, void* handle, void** sendComm,
                                 ncclNetDeviceHandle_v12_t** sendDevComm) {
    void* own = nullptr;
    NCCL_NET_CHECK(guard("connect", [&] { return resolveContext("connect", vendorTag<Net>(), ctx, &own); }));
    return connectOwn(own, ctx, dev, handle, sendComm, sendDevComm);
  }
  static ncclResult_t connectLegacy(int trafficClass, int dev, void* handle, void** sendComm,
                                    ncclNetDeviceHandle_v12_t** sendDevComm) {
    void* own = nullptr;
    NCCL_NET_CHECK(guard("connect", [&] { return NetState<Net>::legacyContext(trafficClass, &own); }));
    return connectOwn(own, own, dev, handle, sendComm, sendDevComm);  // finalized at unload (NetState::UnloadHook)
  }
  // A ConnectStage adopted in this call is filed under `key`, the ctx the host will finalize.
  static ncclResult_t connectOwn(void* own, void* key, int dev, void* handle, void** sendComm,
                                 ncclNetDeviceHandle_v12_t** sendDevComm) {
    return guard("connect", [&] {
      NCCL_NET_SDK_REQUIRE(handle != nullptr && sendComm != nullptr, ncclInternalError,
                           "connect: handle or sendComm is NULL");
      NCCL_NET_CHECK(checkDevice<Net>("connect", dev));
      *sendComm = nullptr;
      ConnectContextScope scope(key);
      return net().connect(own, dev, handle, sendComm, sendDevComm);
    });
  }

  static ncclResult_t accept(void* listenComm, void** recvComm, ncclNetDeviceHandle_v12_t** recvDevComm) {
    return guard("accept", [&] {
      NCCL_NET_SDK_REQUIRE(listenComm != nullptr && recvComm != nullptr, ncclInternalError,
                           "accept: listenComm or recvComm is NULL");
      *recvComm = nullptr;
      return net().accept(listenComm, recvComm, recvDevComm);
    });
  }

  static ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
    return guard("regMr", [&] {
      NCCL_NET_SDK_REQUIRE(comm != nullptr && mhandle != nullptr, ncclInternalError, "regMr: comm or mhandle is NULL");
      return net().regMr(comm, data, size, type, mhandle);
    });
  }
  static ncclResult_t regMrInt(void* comm, void* data, int size, int type, void** mhandle) {
    size_t bytes = 0;
    NCCL_NET_CHECK(intSizeToSize("regMr", size, &bytes));
    return regMr(comm, data, bytes, type, mhandle);
  }
  static ncclResult_t regMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                                  void** mhandle) {
    return guard("regMrDmaBuf", [&]() -> ncclResult_t {
      NCCL_NET_SDK_REQUIRE(comm != nullptr && mhandle != nullptr, ncclInternalError,
                           "regMrDmaBuf: comm or mhandle is NULL");
      if constexpr (has_regMrDmaBuf_v<Net>) {
        return net().regMrDmaBuf(comm, data, size, type, offset, fd, mhandle);
      } else {
        (void)data, (void)size, (void)type, (void)offset, (void)fd;
        NCCL_NET_WARN("regMrDmaBuf: this plugin has no DMA-BUF registration (its devices do not say NCCL_PTR_DMABUF)");
        return ncclInvalidUsage;
      }
    });
  }
  static ncclResult_t deregMr(void* comm, void* mhandle) {
    return guard("deregMr", [&] {
      NCCL_NET_SDK_REQUIRE(comm != nullptr, ncclInternalError, "deregMr: comm is NULL");
      return net().deregMr(comm, mhandle);
    });
  }

  static ncclResult_t isend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                            void** request) {
    return guard("isend", [&] {
      NCCL_NET_SDK_REQUIRE(sendComm != nullptr && request != nullptr, ncclInternalError,
                           "isend: sendComm or request is NULL");
      NCCL_NET_SDK_REQUIRE(data != nullptr || size == 0, ncclInternalError, "isend: NULL data for %zu bytes", size);
      // test() could never report it (sizes are int in every version): refused before a byte moves.
      NCCL_NET_SDK_REQUIRE(size <= static_cast<size_t>(INT_MAX), ncclInternalError,
                           "isend: %zu bytes exceeds INT_MAX, which test() cannot report; keep messages below 2 GiB",
                           size);
      *request = nullptr;
      return net().isend(sendComm, data, size, tag, mhandle, phandle, request);
    });
  }
  static ncclResult_t isendNoPhandle(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request) {
    return isend(sendComm, data, size, tag, mhandle, nullptr, request);
  }
  static ncclResult_t isendInt(void* sendComm, void* data, int size, int tag, void* mhandle, void** request) {
    size_t bytes = 0;
    NCCL_NET_CHECK(intSizeToSize("isend", size, &bytes));
    return isend(sendComm, data, bytes, tag, mhandle, nullptr, request);
  }

  static ncclResult_t irecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                            void** phandles, void** request) {
    return guard("irecv", [&] {
      NCCL_NET_SDK_REQUIRE(recvComm != nullptr && request != nullptr, ncclInternalError,
                           "irecv: recvComm or request is NULL");
      NCCL_NET_SDK_REQUIRE(n >= 1 && n <= kMaxGroupedRecvs, ncclInternalError,
                           "irecv: n = %d grouped receives, expected 1..%d", n, kMaxGroupedRecvs);
      NCCL_NET_SDK_REQUIRE(data != nullptr && sizes != nullptr && tags != nullptr, ncclInternalError,
                           "irecv: data, sizes or tags is NULL");
      detail::optionalRecvCompletionSlot() = *request == reinterpret_cast<void*>(NCCL_NET_OPTIONAL_RECV_COMPLETION);
      *request = nullptr;
      return net().irecv(recvComm, n, data, sizes, tags, mhandles, phandles, request);
    });
  }
  static ncclResult_t irecvNoPhandles(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                                      void** request) {
    return irecv(recvComm, n, data, sizes, tags, mhandles, nullptr, request);
  }
  static ncclResult_t irecvInt(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                               void** request) {
    NCCL_NET_SDK_REQUIRE(n >= 1 && n <= kMaxGroupedRecvs, ncclInternalError,
                         "irecv: n = %d grouped receives, expected 1..%d", n, kMaxGroupedRecvs);
    NCCL_NET_SDK_REQUIRE(sizes != nullptr, ncclInternalError, "irecv: sizes is NULL");
    size_t wide[kMaxGroupedRecvs];
    for (int i = 0; i < n; ++i) NCCL_NET_CHECK(intSizeToSize("irecv", sizes[i], &wide[i]));
    // ncclNet_v6..v8 define no hint in *request (NCCL clears it for them): whatever a host left there is not one.
    if (request != nullptr) *request = nullptr;
    return irecv(recvComm, n, data, wide, tags, mhandles, nullptr, request);
  }

  static ncclResult_t iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
    return guard("iflush", [&]() -> ncclResult_t {
      NCCL_NET_SDK_REQUIRE(recvComm != nullptr && request != nullptr, ncclInternalError,
                           "iflush: recvComm or request is NULL");
      if constexpr (has_iflush_v<Net>) {
        NCCL_NET_SDK_REQUIRE(n >= 1 && n <= kMaxGroupedRecvs, ncclInternalError,
                             "iflush: n = %d grouped receives, expected 1..%d", n, kMaxGroupedRecvs);
        NCCL_NET_SDK_REQUIRE(data != nullptr && sizes != nullptr && mhandles != nullptr, ncclInternalError,
                             "iflush: data, sizes or mhandles is NULL");
        *request = nullptr;
        return net().iflush(recvComm, n, data, sizes, mhandles, request);
      } else {
        // A plugin without iflush only handles host memory (getProperties enforces it): CPU-written data is
        // already visible, so there is nothing to flush and a NULL request tells NCCL the flush is complete.
        (void)n, (void)data, (void)sizes, (void)mhandles;
        *request = nullptr;
        return ncclSuccess;
      }
    });
  }

  static ncclResult_t test(void* request, int* done, int* sizes) {
    return guard("test", [&] {
      NCCL_NET_SDK_REQUIRE(request != nullptr && done != nullptr, ncclInternalError, "test: request or done is NULL");
      CompletedSizes completed(sizes);
      *done = 0;
      NCCL_NET_CHECK(net().test(request, done, completed));
      int index = 0;
      NCCL_NET_SDK_REQUIRE(!completed.badIndex(&index), ncclInternalError,
                           "test: the plugin set the size of receive %d, outside 0..%d", index, kMaxGroupedRecvs - 1);
      NCCL_NET_SDK_REQUIRE(!completed.overflowed(), ncclInvalidUsage,
                           "test: completed size %zu (receive %d) exceeds INT_MAX, which test() cannot report; "
                           "keep messages below 2 GiB",
                           completed.overflowBytes(), completed.overflowIndex());
      return ncclSuccess;
    });
  }

  static ncclResult_t closeSend(void* comm) {
    return guard("closeSend", [&] {
      NCCL_NET_SDK_REQUIRE(comm != nullptr, ncclInternalError, "closeSend: comm is NULL");
      return net().closeSend(comm);
    });
  }
  static ncclResult_t closeRecv(void* comm) {
    return guard("closeRecv", [&] {
      NCCL_NET_SDK_REQUIRE(comm != nullptr, ncclInternalError, "closeRecv: comm is NULL");
      return net().closeRecv(comm);
    });
  }
  static ncclResult_t closeListen(void* comm) {
    return guard("closeListen", [&] {
      NCCL_NET_SDK_REQUIRE(comm != nullptr, ncclInternalError, "closeListen: comm is NULL");
      return net().closeListen(comm);
    });
  }

  static ncclResult_t getDeviceMr(void* comm, void* mhandle, void** dptrMhandle) {
    return guard("getDeviceMr", [&] {
      NCCL_NET_SDK_REQUIRE(comm != nullptr && dptrMhandle != nullptr, ncclInternalError,
                           "getDeviceMr: comm or dptrMhandle is NULL");
      return net().getDeviceMr(comm, mhandle, dptrMhandle);
    });
  }
  static ncclResult_t irecvConsumed(void* recvComm, int n, void* request) {
    return guard("irecvConsumed", [&] {
      NCCL_NET_SDK_REQUIRE(recvComm != nullptr && request != nullptr, ncclInternalError,
                           "irecvConsumed: recvComm or request is NULL");
      NCCL_NET_SDK_REQUIRE(n >= 1 && n <= kMaxGroupedRecvs, ncclInternalError,
                           "irecvConsumed: n = %d grouped receives, expected 1..%d", n, kMaxGroupedRecvs);
      return net().irecvConsumed(recvComm, n, request);
    });
  }

  template <class VProps>
  static ncclResult_t makeVDevice(int* d, VProps* props) {
    return guard("makeVDevice", [&] {
      NCCL_NET_SDK_REQUIRE(d != nullptr && props != nullptr, ncclInternalError, "makeVDevice: d or props is NULL");
      constexpr int kMaxDevs = static_cast<int>(std::size(decltype(props->devs){}));
      NCCL_NET_SDK_REQUIRE(props->ndevs >= 1 && props->ndevs <= kMaxDevs, ncclInternalError,
                           "makeVDevice: ndevs %d outside 1..%d", props->ndevs, kMaxDevs);
      ncclNetVDeviceProps_v12_t newest{};
      newest.ndevs = props->ndevs;
      for (int i = 0; i < props->ndevs; ++i) {
        NCCL_NET_CHECK(checkDevice<Net>("makeVDevice", props->devs[i]));
        newest.devs[i] = props->devs[i];
      }
      return net().makeVDevice(d, &newest);
    });
  }

  static ncclResult_t finalize(void* ctx) {
    return guard("finalize", [&]() -> ncclResult_t {
      void* own = nullptr;
      NCCL_NET_CHECK(resolveContext("finalize", vendorTag<Net>(), ctx, &own));
      if (ctx != nullptr) {
        // Finished before the plugin's finalize runs: one that fails is not called again for this ctx.
        NCCL_NET_SDK_REQUIRE(ContextTokens::instance().finish(ctx), ncclInvalidUsage,
                             "finalize: ctx %p was finalized already (by another thread)", ctx);
        // Connects the host gave up under this ctx: their states go first, as they may use what the ctx holds.
        if (ConnectStageRegistry* registry = ConnectStageRegistry::existing()) {
          if (size_t released = registry->release(ctx))
            NCCL_NET_INFO(NCCL_NET, "finalize: freed %zu connect(s) the host left unfinished", released);
        }
      }
      if constexpr (has_finalize_v<Net>) {
        return net().finalize(own);
      } else {
        (void)own;  // a plugin without per-communicator state has nothing to release
        return ncclSuccess;
      }
    });
  }
  static ncclResult_t setNetAttr(void* ctx, ncclNetAttr_v12_t* attr) {
    return guard("setNetAttr", [&] {
      NCCL_NET_SDK_REQUIRE(attr != nullptr, ncclInternalError, "setNetAttr: attr is NULL");
      void* own = nullptr;
      NCCL_NET_CHECK(resolveContext("setNetAttr", vendorTag<Net>(), ctx, &own));
      return net().setNetAttr(own, attr);
    });
  }
  // v11's struct has v12's layout (pinned in abi_checks.h) but is a type of its own: copied, not read through a cast.
  static ncclResult_t setNetAttrV11(void* ctx, ncclNetAttr_v11_t* attr) {
    static_assert(sizeof(ncclNetAttr_v11_t) == sizeof(ncclNetAttr_v12_t));
    if (attr == nullptr) return setNetAttr(ctx, nullptr);
    ncclNetAttr_v12_t newest;
    std::memcpy(&newest, attr, sizeof(newest));
    return setNetAttr(ctx, &newest);
  }
};

// ---- the tables ---------------------------------------------------------------------------------------------------
// The device handles of every version share one layout (pinned in abi_checks.h) and are opaque here: those pointers
// pass through unchanged.
template <class Net>
struct NetTables {
  using E = NetEntry<Net>;
// An optional entry point: the function when the vendor class has it, else NULL (the body is never instantiated).
// NOLINTBEGIN(bugprone-macro-parentheses): `function` is a qualified name; &(name) would not take its address.
#define NCCL_NET_SDK_OPTIONAL(present, function)        \
  [] {                                                  \
    if constexpr (present) {                            \
      return &function;                                 \
    } else {                                            \
      return static_cast<decltype(&function)>(nullptr); \
    }                                                   \
  }()
  // NOLINTEND(bugprone-macro-parentheses)

  static constexpr ncclNet_v12_t v12 = {
      Net::kName,
      [](void** ctx, uint64_t commId, ncclNetCommConfig_v12_t* config, ncclDebugLogger_t logger,
         ncclProfilerCallback_t profiler) { return E::initV11(12, ctx, commId, config, logger, profiler); },
      E::devices,
      E::template getProperties<12, ncclNetProperties_v12_t>,
      E::listenCtx,
      E::connectCtx,
      E::accept,
      E::regMr,
      E::regMrDmaBuf,
      E::deregMr,
      E::isend,
      E::irecv,
      E::iflush,
      E::test,
      E::closeSend,
      E::closeRecv,
      E::closeListen,
      NCCL_NET_SDK_OPTIONAL(has_getDeviceMr_v<Net>, E::getDeviceMr),
      NCCL_NET_SDK_OPTIONAL(has_irecvConsumed_v<Net>, E::irecvConsumed),
      NCCL_NET_SDK_OPTIONAL(has_makeVDevice_v<Net>, E::template makeVDevice<ncclNetVDeviceProps_v12_t>),
      E::finalize,
      NCCL_NET_SDK_OPTIONAL(has_setNetAttr_v<Net>, E::setNetAttr),
  };

  static constexpr ncclNet_v11_t v11 = {
      Net::kName,
      [](void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config, ncclDebugLogger_t logger,
         ncclProfilerCallback_t profiler) {
        ncclNetCommConfig_v12_t newest{config != nullptr ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF};
        return E::initV11(11, ctx, commId, &newest, logger, profiler);
      },
      E::devices,
      E::template getProperties<11, ncclNetProperties_v11_t>,
      E::listenCtx,
      E::connectCtx,
      E::accept,
      E::regMr,
      E::regMrDmaBuf,
      E::deregMr,
      E::isend,
      E::irecv,
      E::iflush,
      E::test,
      E::closeSend,
      E::closeRecv,
      E::closeListen,
      NCCL_NET_SDK_OPTIONAL(has_getDeviceMr_v<Net>, E::getDeviceMr),
      NCCL_NET_SDK_OPTIONAL(has_irecvConsumed_v<Net>, E::irecvConsumed),
      NCCL_NET_SDK_OPTIONAL(has_makeVDevice_v<Net>, E::template makeVDevice<ncclNetVDeviceProps_v11_t>),
      E::finalize,
      NCCL_NET_SDK_OPTIONAL(has_setNetAttr_v<Net>, E::setNetAttrV11),
  };

  static constexpr ncclNet_v10_t v10 = {
      Net::kName,
      [](ncclDebugLogger_t logger, ncclProfilerCallback_t profiler) { return E::initLegacy(10, logger, profiler); },
      E::devices,
      E::template getProperties<10, ncclNetProperties_v10_t>,
      E::listenLegacy,
      [](int dev, ncclNetCommConfig_v10_t* config, void* handle, void** sendComm,
         ncclNetDeviceHandle_v10_t** sendDevComm) {
        int trafficClass = config != nullptr ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
        return E::connectLegacy(trafficClass, dev, handle, sendComm, sendDevComm);
      },
      E::accept,
      E::regMr,
      E::regMrDmaBuf,
      E::deregMr,
      E::isend,
      E::irecv,
      E::iflush,
      E::test,
      E::closeSend,
      E::closeRecv,
      E::closeListen,
      NCCL_NET_SDK_OPTIONAL(has_getDeviceMr_v<Net>, E::getDeviceMr),
      NCCL_NET_SDK_OPTIONAL(has_irecvConsumed_v<Net>, E::irecvConsumed),
      NCCL_NET_SDK_OPTIONAL(has_makeVDevice_v<Net>, E::template makeVDevice<ncclNetVDeviceProps_v10_t>),
  };

  static constexpr ncclNet_v9_t v9 = {
      Net::kName,
      [](ncclDebugLogger_t logger) { return E::initLegacy(9, logger, nullptr); },
      E::devices,
      E::template getProperties<9, ncclNetProperties_v9_t>,
      E::listenLegacy,
      [](int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v9_t** sendDevComm) {
        return E::connectLegacy(NCCL_NET_TRAFFIC_CLASS_UNDEF, dev, handle, sendComm, sendDevComm);
      },
      E::accept,
      E::regMr,
      E::regMrDmaBuf,
      E::deregMr,
      E::isendNoPhandle,
      E::irecvNoPhandles,
      E::iflush,
      E::test,
      E::closeSend,
      E::closeRecv,
      E::closeListen,
      NCCL_NET_SDK_OPTIONAL(has_getDeviceMr_v<Net>, E::getDeviceMr),
      NCCL_NET_SDK_OPTIONAL(has_irecvConsumed_v<Net>, E::irecvConsumed),
      NCCL_NET_SDK_OPTIONAL(has_makeVDevice_v<Net>, E::template makeVDevice<ncclNetVDeviceProps_v9_t>),
  };

  static constexpr ncclNet_v8_t v8 = {
      Net::kName,
      [](ncclDebugLogger_t logger) { return E::initLegacy(8, logger, nullptr); },
      E::devices,
      E::template getProperties<8, ncclNetProperties_v8_t>,
      E::listenLegacy,
      [](int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v8_t** sendDevComm) {
        return E::connectLegacy(NCCL_NET_TRAFFIC_CLASS_UNDEF, dev, handle, sendComm, sendDevComm);
      },
      E::accept,
      E::regMr,
      E::regMrDmaBuf,
      E::deregMr,
      E::isendInt,
      E::irecvInt,
      E::iflush,
      E::test,
      E::closeSend,
      E::closeRecv,
      E::closeListen,
      NCCL_NET_SDK_OPTIONAL(has_getDeviceMr_v<Net>, E::getDeviceMr),
      NCCL_NET_SDK_OPTIONAL(has_irecvConsumed_v<Net>, E::irecvConsumed),
  };

  static constexpr ncclNet_v7_t v7 = {
      Net::kName,
      [](ncclDebugLogger_t logger) { return E::initLegacy(7, logger, nullptr); },
      E::devices,
      E::template getProperties<7, ncclNetProperties_v7_t>,
      E::listenLegacy,
      [](int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v7_t** sendDevComm) {
        return E::connectLegacy(NCCL_NET_TRAFFIC_CLASS_UNDEF, dev, handle, sendComm, sendDevComm);
      },
      E::accept,
      E::regMrInt,
      E::regMrDmaBuf,
      E::deregMr,
      E::isendInt,
      E::irecvInt,
      E::iflush,
      E::test,
      E::closeSend,
      E::closeRecv,
      E::closeListen,
      NCCL_NET_SDK_OPTIONAL(has_getDeviceMr_v<Net>, E::getDeviceMr),
      NCCL_NET_SDK_OPTIONAL(has_irecvConsumed_v<Net>, E::irecvConsumed),
  };

  static constexpr ncclNet_v6_t v6 = {
      Net::kName,
      [](ncclDebugLogger_t logger) { return E::initLegacy(6, logger, nullptr); },
      E::devices,
      E::template getProperties<6, ncclNetProperties_v6_t>,
      E::listenLegacy,
      [](int dev, void* handle, void** sendComm) {
        return E::connectLegacy(NCCL_NET_TRAFFIC_CLASS_UNDEF, dev, handle, sendComm, nullptr);
      },
      [](void* listenComm, void** recvComm) { return E::accept(listenComm, recvComm, nullptr); },
      E::regMrInt,
      E::regMrDmaBuf,
      E::deregMr,
      E::isendInt,
      E::irecvInt,
      E::iflush,
      E::test,
      E::closeSend,
      E::closeRecv,
      E::closeListen,
  };
};

}  // namespace detail
NCCL_NET_SDK_NAMESPACE_END

// Exports ncclNetPlugin_v6 .. ncclNetPlugin_v12 for the vendor class `Net`. Use once, at namespace scope, in one
// translation unit of the plugin.
// One version's table (V may itself be a macro: it is expanded before pasting).
#define NCCL_NET_SDK_EXPORT_NET_VERSION(Net, V) NCCL_NET_SDK_EXPORT_NET_VERSION_(Net, V)
// NOLINTBEGIN(bugprone-macro-parentheses): Net is a type, a template argument here; (Net) would not be one.
#define NCCL_NET_SDK_EXPORT_NET_VERSION_(Net, V)                                    \
  extern "C" NCCL_NET_SDK_EXPORT_SYMBOL const ncclNet_v##V##_t ncclNetPlugin_v##V = \
      ::nccl_net::sdk::detail::NetTables<::nccl_net::sdk::detail::CheckedNet<Net>>::v##V;
// NOLINTEND(bugprone-macro-parentheses)

#define NCCL_NET_SDK_EXPORT(Net)           \
  NCCL_NET_SDK_EXPORT_NET_VERSION(Net, 12) \
  NCCL_NET_SDK_EXPORT_NET_VERSION(Net, 11) \
  NCCL_NET_SDK_EXPORT_NET_VERSION(Net, 10) \
  NCCL_NET_SDK_EXPORT_NET_VERSION(Net, 9)  \
  NCCL_NET_SDK_EXPORT_NET_VERSION(Net, 8)  \
  NCCL_NET_SDK_EXPORT_NET_VERSION(Net, 7)  \
  NCCL_NET_SDK_EXPORT_NET_VERSION(Net, 6)
