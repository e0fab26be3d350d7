// netns.hpp: two network namespaces joined by a veth pair, made for one nccl-net-check run (--netns) and removed
// afterwards, also when the run fails or is interrupted.
#pragma once

#include <cstdint>
#include <string>

namespace nns::check {

class NetnsPair {
 public:
  // Why --netns cannot run on this machine (not root, no `ip` command), or empty when it can.
  static std::string unavailableReason();

  NetnsPair();
  ~NetnsPair();  // removes whatever create() made
  NetnsPair(const NetnsPair&) = delete;
  NetnsPair& operator=(const NetnsPair&) = delete;

  // Makes both namespaces, the veth pair between them (10.251.0.1/24 and 10.251.0.2/24) and brings the links up.
  // On failure returns false with the failing command and its output in `error`, having removed what it made;
  // `unsupported` is set when not even the first namespace could be made (no namespace support here).
  bool create(std::string* error, bool* unsupported);
  void remove();
  // Bytes the listener's veth end received and sent so far: evidence that the two sides talked across the pair.
  bool listenerTraffic(uint64_t* rxBytes, uint64_t* txBytes, std::string* error) const;

  const std::string& listenerNamespace() const { return nsA_; }
  const std::string& peerNamespace() const { return nsB_; }
  const std::string& listenerInterface() const { return ifA_; }
  const std::string& peerInterface() const { return ifB_; }
  const std::string& interfacePrefix() const { return prefix_; }  // names both veth ends
  static constexpr const char* kListenerAddress = "10.251.0.1";
  static constexpr const char* kPeerAddress = "10.251.0.2";

 private:
  std::string nsA_, nsB_, ifA_, ifB_, prefix_;
  bool created_ = false;
  int creator_ = 0;  // the pid that made them: a forked copy of the object (a rule's process) removes nothing
};

// Moves the calling process (single-threaded) into the named namespace (/var/run/netns/NAME).
bool enterNetns(const std::string& name, std::string* error);

// Removes the namespaces of the live NetnsPair from a signal handler (fork/exec of `ip` only: async-signal-safe).
void removeNetnsFromSignalHandler();

}  // namespace nns::check
