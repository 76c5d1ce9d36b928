// Pipeline cache persistence (written, reloaded, stale data ignored, unwritable directory only a warning), cache
// directory resolution, and SPIR-V reflection of the embedded shaders and of malformed modules.
#include <doctest/doctest.h>

#include <fstream>

#include "core/error.h"
#include "vk/spirv_reflect.h"
#include "vk_test_util.h"

using namespace greta;
using namespace greta::vk;
using namespace greta::vk::test;
namespace fs = std::filesystem;

namespace {

ContextOptions options_with_cache(const fs::path& dir) {
  ContextOptions o = test_options();
  o.cache_dir = dir.string();
  return o;
}

void make_pipelines(Pipelines& p) {
  p.get(ShaderId::fill_u32, {{0, 64}});
  p.get(ShaderId::copy_u32, {{0, 128}});
  p.get(ShaderId::add_f32, {{0, 256}});
}

}  // namespace

TEST_CASE("the pipeline cache is written, reloaded, and stale or corrupt data is ignored") {
  const fs::path dir = scratch_dir("cache-roundtrip") / "nested" / "dir";  // created on save
  fs::remove_all(dir);
  std::string path;
  {
    VkFixture f;
    f.ctx(options_with_cache(dir));
    CHECK(f.pipes().cache().loaded_bytes() == 0);
    path = f.pipes().cache().path();
    CHECK(path.find(dir.string()) == 0);
    make_pipelines(f.pipes());
    f.finish();  // Pipelines' destructor saves
    CHECK(f.warnings().empty());
  }
  REQUIRE(fs::exists(path));
  const auto size = fs::file_size(path);
  CHECK(size >= 32);  // at least the VkPipelineCacheHeaderVersionOne header
  {
    VkFixture f;
    f.ctx(options_with_cache(dir));
    CHECK(f.pipes().cache().loaded_bytes() == size);
    make_pipelines(f.pipes());  // served from the cache where the driver caches
    CHECK(f.pipes().cache().save());
  }
  // Corrupt header: ignored (not handed to the driver), the cache starts empty and is rewritten.
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    const auto junk = random_bytes(32, 4);
    file.write(reinterpret_cast<const char*>(junk.data()), 32);
  }
  {
    VkFixture f;
    f.ctx(options_with_cache(dir));
    CHECK(f.pipes().cache().loaded_bytes() == 0);
    make_pipelines(f.pipes());
  }
  CHECK(fs::file_size(path) >= 32);
  // Persistence off: no path, nothing written.
  {
    VkFixture f;
    ContextOptions o = options_with_cache(dir);
    o.persist_pipeline_cache = false;
    f.ctx(o);
    CHECK(f.pipes().cache().path().empty());
    make_pipelines(f.pipes());
    CHECK(!f.pipes().cache().save());
  }
}

TEST_CASE_FIXTURE(VkFixture, "an unwritable cache directory is a warning, not an error") {
  const fs::path blocker = scratch_dir("blocked") / "a-file";
  { std::ofstream(blocker) << "not a directory"; }
  ctx(options_with_cache(blocker / "cache"));  // its parent is a regular file
  make_pipelines(pipes());
  CHECK(!pipes().cache().save());
  REQUIRE(!warnings().empty());
  CHECK(warnings().front().find("could not create the pipeline cache directory") == 0);
}

TEST_CASE("default_cache_dir: GRETA_CACHE_DIR, then XDG_CACHE_HOME/greta, then ~/.cache/greta") {
  {
    ScopedEnv a("GRETA_CACHE_DIR", "/tmp/g1");
    ScopedEnv b("XDG_CACHE_HOME", "/tmp/x");
    CHECK(default_cache_dir() == "/tmp/g1");
  }
  {
    ScopedEnv a("GRETA_CACHE_DIR", nullptr);
    ScopedEnv b("XDG_CACHE_HOME", "/tmp/x");
    CHECK(default_cache_dir() == "/tmp/x/greta");
  }
  {
    ScopedEnv a("GRETA_CACHE_DIR", nullptr);
    ScopedEnv b("XDG_CACHE_HOME", "relative/ignored");
    ScopedEnv c("HOME", "/home/someone");
    CHECK(default_cache_dir() == "/home/someone/.cache/greta");
  }
  {
    ScopedEnv a("GRETA_CACHE_DIR", nullptr);
    ScopedEnv b("XDG_CACHE_HOME", nullptr);
    ScopedEnv c("HOME", nullptr);
    CHECK(default_cache_dir().empty());
  }
}

TEST_CASE("SPIR-V reflection of the embedded shaders") {
  auto reflect = [](ShaderId id) {
    const ShaderBlob& b = shader_blob(id);
    REQUIRE(b.words != nullptr);
    return reflect_spirv(b.words, b.word_count);
  };
  const auto fill = reflect(ShaderId::fill_u32);
  CHECK(fill.binding_count == 1);
  CHECK(fill.push_constant_bytes == 8);
  CHECK(fill.local_size_spec_id[0] == 0);
  CHECK(fill.local_size_spec_id[1] == -1);
  CHECK(fill.has_spec_id(0));
  const auto copy4 = reflect(ShaderId::copy_u32x4);
  CHECK(copy4.binding_count == 2);
  CHECK(copy4.push_constant_bytes == 4);
  const auto add = reflect(ShaderId::add_f32);
  CHECK(add.binding_count == 3);
  CHECK(!add.has_capability(spv_capability::float16));
  const auto add16 = reflect(ShaderId::add_f16);
  CHECK(add16.binding_count == 3);
  CHECK(add16.has_capability(spv_capability::float16));
  if (shader_available(ShaderId::coopmat_tile_f16_f32)) {
    const auto cm = reflect(ShaderId::coopmat_tile_f16_f32);
    CHECK(cm.has_capability(spv_capability::cooperative_matrix_khr));
    CHECK(cm.binding_count == 3);
    CHECK(cm.push_constant_bytes == 12);
  }
}

TEST_CASE("SPIR-V reflection rejects malformed modules and never crashes on garbage") {
  const ShaderBlob& b = shader_blob(ShaderId::add_f32);
  std::vector<uint32_t> words(b.words, b.words + b.word_count);
  CHECK_THROWS_WITH_AS(reflect_spirv(words.data(), 3), doctest::Contains("not a SPIR-V module"), greta::Error);
  auto bad_magic = words;
  bad_magic[0] ^= 1;
  CHECK_THROWS_AS(reflect_spirv(bad_magic.data(), bad_magic.size()), greta::Error);
  auto overrun = words;
  overrun[5] = (0xffffu << 16) | (overrun[5] & 0xffffu);  // first instruction claims 65535 words
  CHECK_THROWS_WITH_AS(reflect_spirv(overrun.data(), overrun.size()), doctest::Contains("overruns"), greta::Error);
  auto zero = words;
  zero[5] = 0;
  CHECK_THROWS_AS(reflect_spirv(zero.data(), zero.size()), greta::Error);
  // Random corruption: either a clean greta::Error or a result; never a crash (ASan run checks memory safety).
  std::mt19937 rng(1234);
  int threw = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    auto w = words;
    const int flips = 1 + int(rng() % 4);
    for (int k = 0; k < flips; ++k) w[5 + rng() % (w.size() - 5)] = rng() % 3 == 0 ? rng() : (rng() & 0xff);
    try {
      reflect_spirv(w.data(), w.size());
    } catch (const greta::Error&) {
      ++threw;
    }
  }
  CHECK(threw > 0);
}
