// Resident-memory readings of this process, for the measuring commands (bench, perf, run) and the
// server's /metrics.
//
// All figures are in MB (MiB, 2^20 bytes) and come from /proc/self/status:
// - VmRSS: resident now;
// - VmHWM: the high-water mark of VmRSS. The kernel lets a process reset it by writing "5" to
//   /proc/self/clear_refs (Linux >= 4.0). Where that is not allowed (old kernels, some sandboxes),
//   PeakTracker falls back to the maximum of the RSS values it sampled, and says so.
#pragma once

#include <string>

namespace basalt {

// VmRSS in MB; 0 when /proc is not readable.
double rss_now_mb();
// VmHWM in MB (peak since process start or the last reset); 0 when not readable.
double rss_hwm_mb();
// RssAnon in MB: the anonymous part of VmRSS (heap, stacks, arenas), without the file-backed pages
// (the program's code, mapped model files). Code pages faulted in on first use stay resident
// after a session is released, so "memory given back" is best judged on this figure.
double rss_anon_mb();
// RssFile + RssShmem in MB: the file-backed part of VmRSS (code, mapped model files). The kernel
// may keep code pages resident after a session is released; the memory contract's "returned on
// release" is judged on rss_anon_mb, and this figure is reported beside it.
double rss_file_mb();
// Resets VmHWM to the current RSS. Returns false when the kernel refuses.
bool reset_rss_hwm();

// Peak resident memory over a stretch of work. start() begins a stretch (resetting VmHWM when
// allowed), sample() records the current RSS, peak_mb() is the peak since start(): VmHWM when the
// reset worked, else the largest sample (a lower bound of the true peak).
class PeakTracker {
 public:
  void start();
  void sample();
  double peak_mb() const;
  // "VmHWM" or "sampled" (VmHWM could not be reset, so only sampled values count).
  const char* source() const { return hwm_reset_ ? "VmHWM" : "sampled"; }

 private:
  bool hwm_reset_ = false;
  double sampled_max_ = 0;
};

}  // namespace basalt
