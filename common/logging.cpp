#include "common/logging.hpp"
#include "common/json_escape.hpp"

#include <mutex>
#include <vector>

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

namespace oncegate::log {

namespace {

constexpr const char* components[] = {"gateway", "actors", "store",
                                      "cluster"};

constexpr const char* text_pattern = "%Y-%m-%dT%H:%M:%S.%e%z %l [%n] %v";

// `%*`: the message as the body of a JSON string (escaped).
class json_message final : public spdlog::custom_flag_formatter {
public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    json_escape({msg.payload.data(), msg.payload.size()},
                [&dest](std::string_view piece) { dest.append(piece); });
  }

  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<json_message>();
  }
};

std::unique_ptr<spdlog::formatter> make_formatter(const std::string& format) {
  auto f = std::make_unique<spdlog::pattern_formatter>();
  if (format == "json") {
    f->add_flag<json_message>('*');
    f->set_pattern(R"({"ts":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l",)"
                   R"("component":"%n","msg":"%*"})");
  } else {
    f->set_pattern(text_pattern);
  }
  return f;
}

struct state {
  std::mutex mtx;
  std::vector<spdlog::sink_ptr> sinks{
    std::make_shared<spdlog::sinks::stderr_sink_mt>()};
  std::string format = "text";
};

state& global() {
  static state st;
  return st;
}

std::shared_ptr<spdlog::logger> get(const char* name) {
  auto& st = global();
  std::lock_guard<std::mutex> guard{st.mtx};
  if (auto lg = spdlog::get(name))
    return lg;
  auto lg = std::make_shared<spdlog::logger>(name, st.sinks.begin(),
                                             st.sinks.end());
  lg->set_formatter(make_formatter(st.format));
  lg->set_level(spdlog::get_level());
  spdlog::register_logger(lg);
  return lg;
}

bool valid_level(const std::string& x) {
  for (auto name : {"trace", "debug", "info", "warn", "error", "critical",
                    "off"})
    if (x == name)
      return true;
  return false;
}

// Calls `fn(component, level)` for each `component=level` of `levels`;
// returns an error message for a malformed entry.
template <class F>
std::string each_level(const std::string& levels, F fn) {
  size_t pos = 0;
  while (pos < levels.size()) {
    auto end = levels.find(',', pos);
    if (end == std::string::npos)
      end = levels.size();
    auto item = levels.substr(pos, end - pos);
    pos = end + 1;
    if (item.empty())
      continue;
    auto eq = item.find('=');
    auto name = item.substr(0, eq);
    auto level = eq == std::string::npos ? "" : item.substr(eq + 1);
    bool known = false;
    for (auto c : components)
      known = known || name == c;
    if (!known)
      return "log-levels: unknown component '" + name
             + "' (gateway, actors, store, cluster)";
    if (!valid_level(level))
      return "log-levels: bad level '" + level + "' for " + name;
    fn(name, level);
  }
  return {};
}

} // namespace

std::string check(const log_options& opts) {
  if (!valid_level(opts.level))
    return "log-level must be one of trace, debug, info, warn, error, "
           "critical, off";
  if (opts.format != "text" && opts.format != "json")
    return "log-format must be text or json";
  if (!opts.file.empty() && (opts.file_size < 4096 || opts.file_count < 1))
    return "log-file-size must be at least 4096 and log-file-count positive";
  return each_level(opts.levels, [](const std::string&, const std::string&) {});
}

std::string init(const log_options& opts) {
  if (auto problem = check(opts); !problem.empty())
    return problem;
  std::vector<spdlog::sink_ptr> sinks{
    std::make_shared<spdlog::sinks::stderr_sink_mt>()};
  if (!opts.file.empty()) {
    try {
      sinks.push_back(std::make_shared<spdlog::sinks::rotating_file_sink_mt>(
        opts.file, opts.file_size, opts.file_count));
    } catch (const spdlog::spdlog_ex& ex) {
      return "log-file: " + std::string{ex.what()};
    }
  }
  spdlog::set_level(spdlog::level::from_str(opts.level));
  {
    auto& st = global();
    std::lock_guard<std::mutex> guard{st.mtx};
    st.sinks = sinks;
    st.format = opts.format;
  }
  for (auto name : components) {
    auto lg = get(name);
    lg->sinks() = sinks;
    lg->set_formatter(make_formatter(opts.format));
    lg->set_level(spdlog::get_level());
  }
  each_level(opts.levels, [](const std::string& name,
                             const std::string& level) {
    get(name.c_str())->set_level(spdlog::level::from_str(level));
  });
  return {};
}

void init(const std::string& level) {
  log_options opts;
  opts.level = level;
  init(opts);
}

// Looked up once: spdlog's registry takes a mutex per lookup, and these are
// called on every request.
std::shared_ptr<spdlog::logger> gateway() {
  static auto lg = get("gateway");
  return lg;
}

std::shared_ptr<spdlog::logger> actors() {
  static auto lg = get("actors");
  return lg;
}

std::shared_ptr<spdlog::logger> store() {
  static auto lg = get("store");
  return lg;
}

std::shared_ptr<spdlog::logger> cluster() {
  static auto lg = get("cluster");
  return lg;
}

} // namespace oncegate::log
