// Resident-memory readings (see rss.hpp): the CLI and the server report them.
#include "core/rss.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace basalt {

// Reads one "Key:   1234 kB" line of /proc/self/status, in MB; 0 when absent.
static double status_field_mb(const char* key) {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  char line[256];
  size_t klen = std::strlen(key);
  double mb = 0;
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, key, klen) == 0 && line[klen] == ':') {
      long long kb = 0;
      if (std::sscanf(line + klen + 1, "%lld", &kb) == 1) mb = double(kb) / 1024.0;
      break;
    }
  }
  std::fclose(f);
  return mb;
}

double rss_now_mb() { return status_field_mb("VmRSS"); }
double rss_hwm_mb() { return status_field_mb("VmHWM"); }
double rss_anon_mb() { return status_field_mb("RssAnon"); }
double rss_file_mb() { return status_field_mb("RssFile") + status_field_mb("RssShmem"); }

bool reset_rss_hwm() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  bool ok = std::fputs("5", f) >= 0;
  ok = (std::fclose(f) == 0) && ok;  // the write reaches the kernel at fclose
  return ok;
}

void PeakTracker::start() {
  hwm_reset_ = reset_rss_hwm();
  sampled_max_ = rss_now_mb();
}

void PeakTracker::sample() { sampled_max_ = std::max(sampled_max_, rss_now_mb()); }

double PeakTracker::peak_mb() const {
  // After a successful reset VmHWM covers everything in between, samples included.
  if (hwm_reset_) return std::max(rss_hwm_mb(), sampled_max_);
  return sampled_max_;
}

}  // namespace basalt
