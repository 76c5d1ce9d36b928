#include "engine/trace.h"

#include <cstdio>
#include <memory>

#include "core/error.h"

namespace greta::engine {

namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
      continue;
    }
    out += c;
  }
  return out + "\"";
}

}  // namespace

void Trace::span(Track track, std::string name, std::string category, int64_t start_ns, int64_t end_ns) {
  events_.push_back({track, std::move(name), std::move(category), start_ns, std::max(end_ns, start_ns)});
}

void Trace::write(const std::string& path) const {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "w"), &std::fclose);
  if (!f) fail("cannot write the trace ", path);
  const int64_t origin = ns(origin_);
  std::fprintf(f.get(), "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
  std::fprintf(f.get(), "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 1, \"tid\": 1, \"args\": {\"name\": \"host\"}},\n");
  std::fprintf(f.get(), "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 1, \"tid\": 2, \"args\": {\"name\": \"device\"}}");
  for (const Event& e : events_)
    std::fprintf(f.get(), ",\n{\"ph\": \"X\", \"pid\": 1, \"tid\": %d, \"name\": %s, \"cat\": %s, \"ts\": %.3f, \"dur\": %.3f}",
                 int(e.track), json_string(e.name).c_str(), json_string(e.category).c_str(),
                 double(e.start_ns - origin) * 1e-3, double(e.end_ns - e.start_ns) * 1e-3);
  std::fprintf(f.get(), "\n]}\n");
  if (std::ferror(f.get())) fail("error writing the trace ", path);
}

}  // namespace greta::engine
