#include "doctest_torch.hpp"

#include <atomic>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>

#include "embcache/core/error.hpp"
#include "embcache/core/file_lock.hpp"
#include "embcache/store/cache_description.hpp"
#include "embcache/store/cache_reader.hpp"
#include "embcache/store/cache_store.hpp"
#include "precompute_fixture.hpp"
#include "test_support.hpp"

using namespace embcache;
using namespace embcache::testing;
namespace fs = std::filesystem;

TEST_SUITE_BEGIN("store");

TEST_CASE("commit records rebuild every committed row bit for bit, from recorded chunk bytes and record tails") {
  Setup s;
  count_calls(s.options());
  CacheReader full(s.cache);
  const RowBatch want = full.read_rows(0, 13);
  const StoreArgs args(full);
  fs::remove(s.cache);
  {
    auto store = args.open(s.cache);
    store->set_levels(args.levels);
    store->expect_rows(5);  // chunks of 5 rows, so commits fall mid-chunk
    store->append(full.read_rows(0, 7));
    store->commit();  // chunk 0, and rows 5-6 in the record
    store->append(full.read_rows(7, 6));
    store->commit();  // chunk 1, and rows 10-12 in the record
    store->append(full.read_rows(13, 4));  // never committed
  }  // dropped without consolidating, as a SIGKILL would
  REQUIRE_FALSE(fs::exists(s.cache));
  REQUIRE(fs::exists(s.cache + ".runs/all/next.h5"));
  // Nothing runs now: a reader is told what is there, not that the cache is being written.
  try {
    describe_cache(s.cache);
    FAIL("described a cache that is not there");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()) == s.cache + ": no cache yet, but an interrupted run left 2 commits; the next "
                                             "precompute into it installs them and computes the rest");
  }
  {
    auto store = args.open(s.cache);
    REQUIRE(store->recovered_rows() == 13);
    REQUIRE(store->committed().size() == 13);
  }
  REQUIRE_FALSE(fs::exists(s.cache + ".runs"));
  CacheReader recovered(s.cache);
  REQUIRE(recovered.rows() == 13);
  testing::require_same_rows(recovered.read_rows(0, 13), want);
}

TEST_CASE("a second writer is refused while the first holds the lock") {
  Setup s;
  count_calls(s.options());
  CacheReader reader(s.cache);
  CacheStore first(s.cache, reader.signature(), reader.label_kinds(), reader.storage(), CommitPolicy{}, false);
  const std::string message = error_of<IoError>(s.options());
  REQUIRE(contains(message, "being written by another embcache process"));
}

TEST_CASE("shards opening and closing at once never lose their folder to each other's clean-up") {
  // A shard that ends with nothing left removes CACHE.runs when it is empty. Another shard's
  // store creates CACHE.runs and then its own folder in it: a removal between the two once
  // failed that shard with "cannot create ...: No such file or directory" (CI, e2e_scale).
  Setup s;
  count_calls(s.options());
  const StoreArgs args{CacheReader(s.cache)};
  const std::string fresh = s.dir.file("fresh.h5");
  std::atomic<int> failures{0};
  std::string first_failure;
  std::mutex failure_mutex;
  auto open_and_close = [&](const std::string& shard) {
    for (int i = 0; i < 500 && failures.load() == 0; ++i) {
      try {
        CacheStore store(fresh, args.signature, args.kinds, args.storage, CommitPolicy{}, false, shard);
      } catch (const std::exception& e) {
        const std::lock_guard<std::mutex> hold(failure_mutex);
        if (failures++ == 0) first_failure = e.what();
      }
    }
  };
  std::thread a(open_and_close, "0/2");
  std::thread b(open_and_close, "1/2");
  a.join();
  b.join();
  CHECK_MESSAGE(failures.load() == 0, first_failure);
  CHECK_FALSE(fs::exists(fresh + ".runs"));
}

TEST_CASE("--overwrite waits for an install in progress before it removes the cache") {
  // An install holds CACHE.h5.lock while it links a part and renames a new view over the cache.
  // An overwrite that removed the parts meanwhile left a view naming parts that were gone.
  Setup s;
  count_calls(s.options());
  const StoreArgs args{CacheReader(s.cache)};
  std::thread overwrite;
  std::string failure;
  {
    const FileLock installing(s.cache + ".lock", FileLock::Wait{"unwritable", nullptr});
    std::atomic<pid_t> overwrite_id{0};
    overwrite = std::thread([&] {
      overwrite_id = thread_id();
      try {
        CacheStore store(s.cache, args.signature, args.kinds, args.storage, CommitPolicy{}, true, "0/1");
      } catch (const std::exception& e) {
        failure = e.what();
      }
    });
    while (overwrite_id.load() == 0) std::this_thread::yield();
    wait_until_asleep(overwrite_id);  // blocked on the install lock
    CHECK(fs::exists(s.cache));
  }
  overwrite.join();
  CHECK_MESSAGE(failure.empty(), failure);
  CHECK_FALSE(fs::exists(s.cache));
}

TEST_SUITE_END();
