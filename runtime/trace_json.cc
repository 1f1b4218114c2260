#include "baton/runtime/trace_json.h"

#include "absl/strings/str_cat.h"
#include "baton/runtime/output_file.h"
#include "nlohmann/json.hpp"

namespace baton {

struct TraceJsonWriter::Events {
  nlohmann::json array = nlohmann::json::array();
};

namespace {

nlohmann::json ArgsObject(const TraceArgs& args) {
  nlohmann::json o = nlohmann::json::object();
  for (const auto& [key, value] : args) {
    std::visit([&o, &key = key](const auto& v) { o[key] = v; }, value);
  }
  return o;
}

nlohmann::json Metadata(const char* what, int pid) {
  return {{"ph", "M"}, {"name", what}, {"pid", pid}};
}

}  // namespace

TraceJsonWriter::TraceJsonWriter() : events_(std::make_unique<Events>()) {}
TraceJsonWriter::~TraceJsonWriter() = default;

void TraceJsonWriter::ProcessName(int pid, const std::string& name) {
  nlohmann::json e = Metadata("process_name", pid);
  e["args"] = {{"name", name}};
  events_->array.push_back(std::move(e));
}

void TraceJsonWriter::ProcessSortIndex(int pid, int index) {
  nlohmann::json e = Metadata("process_sort_index", pid);
  e["args"] = {{"sort_index", index}};
  events_->array.push_back(std::move(e));
}

void TraceJsonWriter::ThreadName(int pid, int tid, const std::string& name) {
  nlohmann::json e = Metadata("thread_name", pid);
  e["tid"] = tid;
  e["args"] = {{"name", name}};
  events_->array.push_back(std::move(e));
}

void TraceJsonWriter::ThreadSortIndex(int pid, int tid, int index) {
  nlohmann::json e = Metadata("thread_sort_index", pid);
  e["tid"] = tid;
  e["args"] = {{"sort_index", index}};
  events_->array.push_back(std::move(e));
}

void TraceJsonWriter::Complete(int pid, int tid, const std::string& name,
                               const std::string& category, double ts_us,
                               double dur_us, const TraceArgs& args) {
  nlohmann::json e = {{"ph", "X"}, {"name", name}, {"cat", category},
                      {"pid", pid}, {"tid", tid}, {"ts", ts_us},
                      {"dur", dur_us}};
  if (!args.empty()) e["args"] = ArgsObject(args);
  events_->array.push_back(std::move(e));
}

void TraceJsonWriter::Counter(int pid, const std::string& name, double ts_us,
                              const TraceArgs& values) {
  events_->array.push_back({{"ph", "C"}, {"name", name}, {"pid", pid},
                            {"ts", ts_us}, {"args", ArgsObject(values)}});
}

size_t TraceJsonWriter::size() const { return events_->array.size(); }

std::string TraceJsonWriter::Json() const {
  nlohmann::json j;
  j["traceEvents"] = events_->array;
  j["displayTimeUnit"] = "ms";
  // replace: bytes that are not UTF-8 become U+FFFD instead of throwing.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Status TraceJsonWriter::Write(const std::string& path) const {
  return WriteOutputFile(path, Json() + "\n", "the trace");
}

}  // namespace baton
