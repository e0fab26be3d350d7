// leaky_plugin.cc: a library built the way a plugin should not be (default visibility, no version script), for the
// loader's reading of what a library exports beyond NCCL's tables. It has no ncclNet table: it is only read, never
// loaded as a plugin. (Built into the test folder, not lib/, so nccl-net-info's default listing does not show it.)
// A helper of the plugin's own, exported by default: the host's own `leakyHelper`, if it had one, would take its place.
__attribute__((visibility("default"))) int leakyHelper(int x) {
  return x + 1;
}

// A function-local static of an inline function: GCC gives it a GNU-unique symbol (clang does not).
__attribute__((visibility("default"))) inline int& leakyShared() {
  static int shared = 1;
  return shared;
}
__attribute__((visibility("default"))) int leakyCount() {
  return ++leakyShared();
}
