#include "actors/node.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <system_error>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>

#include "common/errc.hpp"
#include "common/logging.hpp"
#include "persistence/local_sink.hpp"

namespace oncegate {

const registry_actor& node::shard_for(const std::string& route,
                                      const std::string& key) const {
  if (registries.size() == 1)
    return registries.front();
  auto h = std::hash<std::string>{}(route) * 31 + std::hash<std::string>{}(key);
  return registries[h % registries.size()];
}

void node::shutdown() {
  caf::anon_send_exit(alarm, caf::exit_reason::user_shutdown);
  for (auto& reg : registries)
    caf::anon_send_exit(reg, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(store, caf::exit_reason::user_shutdown);
}

namespace {

// Holds `dir`'s lock file (`oncegate.lock`, flock) for the rest of the
// process: a second process on the same data dir would commit into the
// same database and Raft log behind this one's back (the first then
// refused every new key). The kernel drops the lock with the process,
// also after SIGKILL. Re-entrant within one process (tests restart nodes
// in process on one directory).
caf::error lock_data_dir(const std::string& dir) {
  static std::mutex mtx;
  static std::map<std::string, int> held;
  std::error_code ec;
  auto key = std::filesystem::canonical(dir, ec).string();
  if (ec)
    key = dir;
  std::lock_guard<std::mutex> guard{mtx};
  if (held.count(key) > 0)
    return {};
  auto path = (std::filesystem::path{dir} / "oncegate.lock").string();
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW,
                  0600);
  if (fd < 0)
    return make_error(errc::storage_failure,
                      "cannot open " + path + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    std::string owner;
    char buf[32] = {};
    auto n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    for (ssize_t i = 0; i < n && buf[i] >= '0' && buf[i] <= '9'; ++i)
      owner += buf[i];
    ::close(fd);
    if (err == EWOULDBLOCK)
      return make_error(errc::storage_failure,
                        "data dir " + dir
                          + " is in use by another oncegate process"
                          + (owner.empty() ? "" : " (pid " + owner + ")"));
    return make_error(errc::storage_failure,
                      "cannot lock " + path + ": " + std::strerror(err));
  }
  // The owner's pid, for the message above (best effort).
  auto pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0
      || ::pwrite(fd, pid.data(), pid.size(), 0) < 0)
    log::store()->warn("store.lock_pid_not_written path={}", path);
  held.emplace(key, fd);
  return {};
}

} // namespace

caf::error prepare_data_dir(node_options& opts) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(opts.data_dir, ec);
  if (ec)
    return make_error(errc::storage_failure,
                      "cannot create data dir " + opts.data_dir + ": "
                        + ec.message());
  // The database, its WAL and the Raft log hold signal bodies, which may
  // carry passphrases: the owner alone may read them, whatever the umask of
  // whoever starts the node (new files follow the umask the program sets;
  // this repairs what an older version or an operator left open).
  constexpr auto private_dir = fs::perms::owner_all;
  constexpr auto private_file = fs::perms::owner_read | fs::perms::owner_write;
  auto tighten = [](const fs::path& p, fs::perms want) {
    std::error_code ignored;
    auto st = fs::symlink_status(p, ignored);
    if (!ignored && (st.permissions() & ~want) != fs::perms::none) {
      fs::permissions(p, want, fs::perm_options::replace, ignored);
      if (ignored)
        log::store()->warn("store.permissions_not_tightened path={} error={}",
                           p.string(), ignored.message());
      else
        log::store()->info("store.permissions_tightened path={}", p.string());
    }
  };
  if (auto err = lock_data_dir(opts.data_dir))
    return err;
  tighten(opts.data_dir, private_dir);
  for (auto it = fs::recursive_directory_iterator(opts.data_dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    auto st = it->symlink_status(ec);
    if (ec)
      break;
    if (fs::is_directory(st))
      tighten(it->path(), private_dir);
    else if (fs::is_regular_file(st))
      tighten(it->path(), private_file);
  }
  if (opts.store.path.empty())
    opts.store.path = (std::filesystem::path{opts.data_dir} / "oncegate.db")
                        .string();
  return {};
}

caf::expected<node> start_node(caf::actor_system& sys, node_options opts,
                               wall_clock_fn now) {
  if (auto err = prepare_data_dir(opts))
    return err;
  auto db = persistence::sqlite_store::open(opts.store);
  if (!db)
    return std::move(db.error());
  // Records still in flight belonged to a process that died while
  // forwarding them: the upstream may have acted, so they are in doubt now
  // and never re-executed automatically.
  {
    auto& store = **db;
    auto err = store.begin();
    auto doubted = err ? caf::expected<uint64_t>{err} : store.doubt_in_flight();
    if (!doubted) {
      store.rollback();
      return std::move(doubted.error());
    }
    if (auto err = store.commit())
      return err;
    if (*doubted > 0)
      log::store()->warn("store.in_flight_to_in_doubt count={}", *doubted);
  }
  log::store()->info("store.opened path={} schema={}", opts.store.path,
                     (*db)->version());
  if (opts.on_store_clock) {
    auto clock = (*db)->clock_ms();
    if (!clock)
      return std::move(clock.error());
    opts.on_store_clock(*clock);
  }
  std::shared_ptr<persistence::sqlite_store> shared{std::move(*db)};
  // Reads on a connection of their own while the writer commits elsewhere.
  std::shared_ptr<persistence::sqlite_store> reader;
  if (opts.commit_thread && !opts.detached_store) {
    auto rd = persistence::sqlite_store::open_reader(opts.store);
    if (!rd)
      return std::move(rd.error());
    reader = std::move(*rd);
  }
  auto store = persistence::spawn_store(
    sys,
    std::make_shared<persistence::local_sink>(std::move(shared),
                                              std::move(reader), &sys),
    opts.store_actor, opts.detached_store);
  return spawn_node_actors(sys, std::move(store), opts, std::move(now));
}

node spawn_node_actors(caf::actor_system& sys, persistence::store_actor store,
                       const node_options& opts, wall_clock_fn now) {
  node result;
  result.store = std::move(store);
  auto shards = std::max<uint32_t>(opts.registry_shards, 1);
  auto per_shard = opts.registry;
  per_shard.max_live_keys = std::max<uint64_t>(
    opts.registry.max_live_keys / shards, 1);
  for (uint32_t i = 0; i < shards; ++i)
    result.registries.push_back(spawn_registry(sys, result.store, per_shard));
  result.alarm = spawn_alarm(sys, result.store, opts.alarm, std::move(now));
  return result;
}

} // namespace oncegate
