// GGUF reader and writer: the shared fixtures, write -> read round trips, and hostile inputs (truncations, corrupted
// counts, lengths, dims, types, offsets, alignment), each of which must throw greta::Error naming the problem.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "test_util.h"

using namespace greta;
using namespace greta::model;

namespace {

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE(f.good());
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Expects parsing `bytes` to throw greta::Error whose message contains `needle`; returns the message.
std::string expect_error(std::vector<uint8_t> bytes, const std::string& needle) {
  try {
    GgufFile::from_memory(std::move(bytes), "hostile.gguf");
  } catch (const Error& e) {
    std::string msg = e.what();
    INFO("message: ", msg);
    CHECK(msg.find(needle) != std::string::npos);
    CHECK(msg.find("hostile.gguf: ") == 0);
    CHECK(msg.find('\n') == std::string::npos);
    return msg;
  }
  FAIL("no error, expected one mentioning: ", needle);
  return {};
}

template <class T>
void poke(std::vector<uint8_t>& b, size_t off, T v) {
  REQUIRE(off + sizeof(T) <= b.size());
  std::memcpy(b.data() + off, &v, sizeof(T));
}

// Offset of the first byte after the length-prefixed string `s` in the file (e.g. a key or tensor name).
size_t after_string(const std::vector<uint8_t>& b, std::string_view s) {
  std::vector<uint8_t> pat(8 + s.size());
  uint64_t len = s.size();
  std::memcpy(pat.data(), &len, 8);
  std::memcpy(pat.data() + 8, s.data(), s.size());
  auto it = std::search(b.begin(), b.end(), pat.begin(), pat.end());
  REQUIRE(it != b.end());
  return static_cast<size_t>(it - b.begin()) + pat.size();
}

// A small valid file: a few keys of different types and three tensors (F32, Q8_0, F16).
struct SmallFile {
  GgufWriter w{32};
  std::vector<std::vector<uint8_t>> data;
  std::vector<uint8_t> bytes;
  SmallFile() {
    w.add_string("general.architecture", "llama");
    w.add_uint32("llama.block_count", 3);
    std::vector<std::string> toks = {"<unk>", "a", "bc"};
    w.add_string_array("tokenizer.ggml.tokens", std::span<const std::string>(toks));
    std::vector<float> scores = {0.5f, -1.25f, 3.f};
    w.add_float32_array("tokenizer.ggml.scores", scores);
    w.add_bool("flag", true);
    w.add_tensor("a.weight", {5, 3}, GgmlType::F32);
    w.add_tensor("b.weight", {64, 2}, GgmlType::Q8_0);
    w.add_tensor("c.weight", {7}, GgmlType::F16);
    for (size_t i = 0; i < w.tensor_count(); ++i) data.push_back(random_bytes(w.tensor_bytes(i), 100 + i));
    bytes = w.to_bytes(data);
  }
};

}  // namespace

TEST_CASE("gguf: reads every shared model") {
  const char* names[] = {"stories260K.gguf", "stories260K-f16.gguf", "stories260K-q8_0.gguf", "stories260K-q4_0.gguf",
                         "llama2-tiny-random.gguf", "synth-llama-d256-q4_k_m.gguf", "synth-llama-d256-bf16.gguf",
                         "synth-qwen2-d256-q8_0.gguf", "synth-qwen3-d256-q4_k_m.gguf",
                         "synth-llama-tied-d256-q8_0.gguf", "synth-llama-d256-q2_k.gguf"};
  for (const char* n : names) {
    INFO(n);
    GgufFile f = GgufFile::open(test::shared_path(std::string("models/") + n));
    CHECK((f.version() == 2 || f.version() == 3));
    CHECK(f.alignment() > 0);
    CHECK(f.data_offset() % f.alignment() == 0);
    REQUIRE(!f.tensors().empty());
    CHECK(f.get_string("general.architecture").has_value());
    CHECK(!f.get_string_array("tokenizer.ggml.tokens").empty());
    const GgufTensor* embd = f.find_tensor("token_embd.weight");
    REQUIRE(embd != nullptr);
    CHECK(embd->dims.size() == 2);
    CHECK(embd->dims[1] == f.get_string_array("tokenizer.ggml.tokens").size());
    for (const auto& t : f.tensors()) {
      CHECK(t.data == f.tensors().front().data - f.tensors().front().offset + t.offset);
      CHECK(t.offset + t.n_bytes <= f.file_size() - f.data_offset());
      CHECK(t.n_bytes == row_bytes(t.type, t.row_length()) * t.rows());
    }
  }
  GgufFile s = GgufFile::open(test::shared_path("models/stories260K.gguf"));
  CHECK(s.get_string("general.architecture") == "llama");
  CHECK(s.get_uint("llama.embedding_length") == 64u);
  CHECK(s.get_uint("llama.block_count") == 5u);
  const GgufTensor* embd = s.find_tensor("token_embd.weight");
  CHECK(embd->type == GgmlType::F32);
  CHECK(embd->dims == std::vector<uint64_t>{64, 512});
  // the data view points into the file: compare with the bytes read independently
  auto raw = read_bytes(test::shared_path("models/stories260K.gguf"));
  CHECK(std::memcmp(raw.data() + s.data_offset() + embd->offset, embd->data, embd->n_bytes) == 0);
  CHECK_THROWS_AS(s.get_string("llama.block_count"), Error);
  CHECK_THROWS_AS(s.get_uint("general.architecture"), Error);
  CHECK(!s.get_uint("no.such.key").has_value());
}

TEST_CASE("gguf: vocabulary-only .xz files decompress in memory") {
  GgufFile f = GgufFile::open(test::shared_path("vocab/ggml-vocab-llama-spm.gguf.xz"));
  CHECK(f.tensors().empty());
  CHECK(f.get_string("tokenizer.ggml.model") == "llama");
  CHECK(f.get_string_array("tokenizer.ggml.tokens").size() == 32000);
  CHECK(f.get_float_array("tokenizer.ggml.scores").size() == 32000);
  CHECK(f.get_int_array("tokenizer.ggml.token_type").size() == 32000);
  GgufFile g = GgufFile::open(test::shared_path("vocab/ggml-vocab-qwen2.gguf.xz"));
  CHECK(g.get_string("tokenizer.ggml.model") == "gpt2");
  CHECK(!g.get_string_array("tokenizer.ggml.merges").empty());
  CHECK_THROWS_WITH_AS(GgufFile::open("/nonexistent/x.gguf"), doctest::Contains("cannot open"), Error);
  CHECK_THROWS_WITH_AS(GgufFile::open("/nonexistent/x.gguf.xz"), doctest::Contains("cannot open"), Error);
}

TEST_CASE("gguf: writer round trip keeps metadata of every type and tensor bytes") {
  for (uint64_t alignment : {32u, 64u, 8u}) {
    INFO("alignment ", alignment);
    GgufWriter w(alignment);
    w.add_uint8("t.u8", 250);
    w.add_int8("t.i8", -7);
    w.add_uint16("t.u16", 65000);
    w.add_int16("t.i16", -30000);
    w.add_uint32("t.u32", 4000000000u);
    w.add_int32("t.i32", -2000000000);
    w.add_uint64("t.u64", 0xfedcba9876543210ull);
    w.add_int64("t.i64", -(int64_t(1) << 60));
    w.add_float32("t.f32", 3.25f);
    w.add_float64("t.f64", -1e300);
    w.add_bool("t.bool", true);
    w.add_string("t.str", std::string_view("h\0llo", 5));
    std::vector<std::string> strs = {"", "x", "longer string with spaces", "\xe2\x96\x81uni"};
    w.add_string_array("t.strs", std::span<const std::string>(strs));
    auto fl = test::random_floats(13, 7);
    w.add_float32_array("t.f32s", fl);
    std::vector<int32_t> ints = {-5, 0, 7, 1 << 30};
    w.add_int32_array("t.i32s", ints);
    std::vector<uint8_t> bools = {1, 0, 1};
    w.add_array("t.bools", GgufType::BOOL, bools.size(), bools.data());
    CHECK_THROWS_AS(w.add_uint32("t.u32", 1), Error);

    const GgmlType types[] = {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q8_0,
                              GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q5_1};
    std::mt19937 rng(42);
    for (size_t i = 0; i < std::size(types); ++i) {
      uint64_t be = traits(types[i]).block_elems;
      std::vector<uint64_t> dims = {be * (1 + rng() % 3)};
      for (size_t d = 1, nd = 1 + i % 4; d < nd; ++d) dims.push_back(1 + rng() % 5);
      w.add_tensor("tensor." + std::to_string(i), dims, types[i]);
    }
    std::vector<std::vector<uint8_t>> data;
    for (size_t i = 0; i < w.tensor_count(); ++i) data.push_back(random_bytes(w.tensor_bytes(i), uint32_t(i)));

    auto check = [&](const GgufFile& f) {
      CHECK(f.version() == 3);
      CHECK(f.alignment() == alignment);
      CHECK(f.get_uint("t.u8") == 250u);
      CHECK(f.get_int("t.i8") == -7);
      CHECK(f.get_uint("t.u16") == 65000u);
      CHECK(f.get_int("t.i16") == -30000);
      CHECK(f.get_uint("t.u32") == 4000000000u);
      CHECK(f.get_int("t.i32") == -2000000000);
      CHECK(f.get_uint("t.u64") == 0xfedcba9876543210ull);
      CHECK_THROWS_AS(f.get_int("t.u64"), Error);  // does not fit
      CHECK(f.get_int("t.i64") == -(int64_t(1) << 60));
      CHECK_THROWS_AS(f.get_uint("t.i8"), Error);  // negative
      CHECK(f.get_float("t.f32") == 3.25);
      CHECK(f.get_float("t.f64") == -1e300);
      CHECK(f.get_float("t.u16") == 65000.0);
      CHECK(f.get_bool("t.bool") == true);
      CHECK(f.get_string("t.str") == std::string_view("h\0llo", 5));
      auto s = f.get_string_array("t.strs");
      REQUIRE(s.size() == strs.size());
      for (size_t i = 0; i < s.size(); ++i) CHECK(s[i] == strs[i]);
      CHECK(f.get_float_array("t.f32s") == fl);
      CHECK(f.get_int_array("t.i32s") == std::vector<int64_t>{-5, 0, 7, 1 << 30});
      CHECK(f.find("t.bools")->array_count == 3);
      CHECK_THROWS_AS(f.get_int_array("t.strs"), Error);
      CHECK_THROWS_AS(f.get_string_array("t.f32s"), Error);
      REQUIRE(f.tensors().size() == std::size(types));
      for (size_t i = 0; i < std::size(types); ++i) {
        const GgufTensor& t = f.tensors()[i];
        CHECK(t.name == "tensor." + std::to_string(i));
        CHECK(t.type == types[i]);
        CHECK(t.offset % alignment == 0);
        REQUIRE(t.n_bytes == data[i].size());
        CHECK(std::memcmp(t.data, data[i].data(), t.n_bytes) == 0);
        CHECK(f.find_tensor(t.name) == &t);
      }
      // metadata order is insertion order; alignment key first when not the default
      CHECK(f.metadata().size() == 16u + (alignment != 32 ? 1 : 0));
    };
    auto bytes = w.to_bytes(data);
    CHECK(bytes.size() == w.file_size());
    check(GgufFile::from_memory(bytes, "mem.gguf"));

    auto path = std::filesystem::temp_directory_path() / ("greta_gguf_rt_" + std::to_string(alignment) + ".gguf");
    w.write_file(path.string(), data);
    CHECK(read_bytes(path.string()) == bytes);
    check(GgufFile::open(path.string()));

    // copy_kv reproduces every entry byte for byte
    GgufFile src = GgufFile::from_memory(bytes, "mem.gguf");
    GgufWriter w2(alignment);
    for (const auto& kv : src.metadata())
      if (kv.key != "general.alignment") w2.copy_kv(kv);
    for (size_t i = 0; i < w.tensor_count(); ++i) w2.add_tensor(w.tensor_name(i), src.tensors()[i].dims, types[i]);
    CHECK(w2.to_bytes(data) == bytes);
    std::filesystem::remove(path);
  }
}

TEST_CASE("gguf: stream writer writes in chunks and removes unfinished files") {
  SmallFile sf;
  auto path = (std::filesystem::temp_directory_path() / "greta_gguf_stream.gguf").string();
  {
    GgufStreamWriter s(path, sf.w);
    for (const auto& d : sf.data)
      for (size_t off = 0; off < d.size(); off += 7) s.write(d.data() + off, std::min<size_t>(7, d.size() - off));
    s.finish();
  }
  CHECK(read_bytes(path) == sf.bytes);
  std::filesystem::remove(path);
  {
    GgufStreamWriter s(path, sf.w);
    s.write(sf.data[0].data(), sf.data[0].size());
    CHECK_THROWS_WITH_AS(s.finish(), doctest::Contains("b.weight"), Error);
  }
  CHECK(!std::filesystem::exists(path));
  CHECK(!std::filesystem::exists(path + ".part"));
  GgufWriter w;
  CHECK_THROWS_AS(w.add_tensor("x", {33}, GgmlType::Q8_0), Error);
  CHECK_THROWS_AS(w.add_tensor("x", {1, 2, 3, 4, 5}, GgmlType::F32), Error);
  w.add_tensor("x", {3}, GgmlType::F32);
  CHECK_THROWS_AS(w.add_tensor("x", {3}, GgmlType::F32), Error);
  CHECK_THROWS_AS(GgufWriter(48), Error);
}

TEST_CASE("gguf: truncations of a real file throw at every header offset") {
  auto bytes = read_bytes(test::shared_path("models/stories260K-q4_0.gguf"));
  GgufFile f = GgufFile::from_memory(bytes, "full.gguf");
  uint64_t data_end = 0;
  for (const auto& t : f.tensors()) data_end = std::max(data_end, t.offset + t.n_bytes);
  uint64_t needed = f.data_offset() + data_end;
  std::vector<size_t> cuts;
  for (size_t n = 0; n < f.data_offset() + 64; ++n) cuts.push_back(n);  // every offset of the header
  std::mt19937 rng(3);
  for (int i = 0; i < 200; ++i) cuts.push_back(f.data_offset() + rng() % (needed - f.data_offset()));
  cuts.push_back(needed - 1);
  int errors = 0;
  for (size_t n : cuts) {
    std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + n);
    try {
      GgufFile::from_memory(std::move(cut), "cut.gguf");
    } catch (const Error& e) {
      ++errors;
      std::string msg = e.what();
      if (msg.find(" at offset ") == std::string::npos) FAIL("message lacks an offset: ", msg);
    }
  }
  CHECK(errors == static_cast<int>(cuts.size()));
  // truncating only the final padding is harmless
  if (needed < bytes.size()) CHECK_NOTHROW(GgufFile::from_memory({bytes.begin(), bytes.begin() + needed}, "pad.gguf"));
}

TEST_CASE("gguf: corrupted headers are rejected with a message naming the problem") {
  SmallFile sf;
  const auto& good = sf.bytes;
  REQUIRE_NOTHROW(GgufFile::from_memory(good, "good.gguf"));
  auto b = good;

  SUBCASE("version 2 is read like version 3") {
    poke<uint32_t>(b, 4, 2);
    GgufFile f = GgufFile::from_memory(b, "v2.gguf");
    CHECK(f.version() == 2);
    CHECK(f.tensors().size() == 3);
    CHECK(std::memcmp(f.find_tensor("b.weight")->data, sf.data[1].data(), sf.data[1].size()) == 0);
  }
  SUBCASE("magic") { b[0] = 'X'; expect_error(b, "bad magic"); }
  SUBCASE("empty") { expect_error({}, "bad magic"); }
  SUBCASE("version 1") { poke<uint32_t>(b, 4, 1); expect_error(b, "version 1"); }
  SUBCASE("version 7") { poke<uint32_t>(b, 4, 7); expect_error(b, "unsupported GGUF version 7"); }
  SUBCASE("big-endian") { poke<uint32_t>(b, 4, 3u << 24); expect_error(b, "big-endian"); }
  SUBCASE("huge tensor count") { poke<uint64_t>(b, 8, uint64_t(1) << 60); expect_error(b, "tensor count"); }
  SUBCASE("huge kv count") { poke<uint64_t>(b, 16, ~uint64_t(0)); expect_error(b, "metadata count"); }
  SUBCASE("kv count too high by one") { poke<uint64_t>(b, 16, 6); expect_error(b, "at offset"); }
  SUBCASE("huge key length") { poke<uint64_t>(b, 24, uint64_t(1) << 62); expect_error(b, "key length"); }
  SUBCASE("empty key") { poke<uint64_t>(b, 24, 0); expect_error(b, "at offset"); }
  SUBCASE("unknown value type") {
    poke<uint32_t>(b, after_string(b, "general.architecture"), 13);
    expect_error(b, "unknown metadata value type 13");
  }
  SUBCASE("huge string value") {
    poke<uint64_t>(b, after_string(b, "general.architecture") + 4, uint64_t(1) << 50);
    expect_error(b, "string value length");
  }
  SUBCASE("nested array") {
    poke<uint32_t>(b, after_string(b, "tokenizer.ggml.tokens") + 4, 9);
    expect_error(b, "nested array");
  }
  SUBCASE("huge string array") {
    poke<uint64_t>(b, after_string(b, "tokenizer.ggml.tokens") + 8, uint64_t(1) << 61);
    expect_error(b, "array length");
  }
  SUBCASE("huge float array") {
    poke<uint64_t>(b, after_string(b, "tokenizer.ggml.scores") + 8, uint64_t(1) << 62);
    expect_error(b, "array length");
  }
  SUBCASE("array element type") {
    poke<uint32_t>(b, after_string(b, "tokenizer.ggml.scores") + 4, 77);
    expect_error(b, "unknown metadata value type 77");
  }
  SUBCASE("bool not 0/1") {
    b[after_string(b, "flag") + 4] = 2;
    expect_error(b, "neither 0 nor 1");
  }
  SUBCASE("duplicate key") {
    GgufWriter w;
    w.add_string("a", "x");
    w.add_string("b", "y");
    auto d = w.to_bytes({});
    d[after_string(d, "b") - 1] = 'a';
    expect_error(d, "duplicate metadata key 'a'");
  }
  SUBCASE("zero dims") { poke<uint32_t>(b, after_string(b, "a.weight"), 0); expect_error(b, "dimensions"); }
  SUBCASE("five dims") { poke<uint32_t>(b, after_string(b, "a.weight"), 5); expect_error(b, "5 dimensions"); }
  SUBCASE("zero dim") { poke<uint64_t>(b, after_string(b, "a.weight") + 4 + 8, 0); expect_error(b, "is zero"); }
  SUBCASE("dim overflow") {
    poke<uint64_t>(b, after_string(b, "b.weight") + 4, uint64_t(1) << 40);
    poke<uint64_t>(b, after_string(b, "b.weight") + 12, uint64_t(1) << 40);
    expect_error(b, "overflows");
  }
  SUBCASE("huge dims past the data") {
    poke<uint64_t>(b, after_string(b, "a.weight") + 4, uint64_t(1) << 40);
    expect_error(b, "past the end");
  }
  SUBCASE("unknown tensor type") {
    poke<uint32_t>(b, after_string(b, "c.weight") + 4 + 8, 16);
    auto msg = expect_error(b, "type id 16");
    CHECK(msg.find("c.weight") != std::string::npos);
    CHECK(msg.find("iq2_xxs") != std::string::npos);
  }
  SUBCASE("absurd tensor type") {
    poke<uint32_t>(b, after_string(b, "c.weight") + 4 + 8, 0xdeadbeef);
    expect_error(b, "type id 3735928559");
  }
  SUBCASE("row not a block multiple") {
    poke<uint64_t>(b, after_string(b, "b.weight") + 4, 48);
    expect_error(b, "not a multiple of the q8_0 block size 32");
  }
  SUBCASE("misaligned offset") {
    poke<uint64_t>(b, after_string(b, "c.weight") + 4 + 8 + 4, 8);
    expect_error(b, "not a multiple of the alignment");
  }
  SUBCASE("offset past the end") {
    poke<uint64_t>(b, after_string(b, "c.weight") + 4 + 8 + 4, uint64_t(1) << 20);
    expect_error(b, "past the end");
  }
  SUBCASE("offset near 2^64") {
    poke<uint64_t>(b, after_string(b, "c.weight") + 4 + 8 + 4, ~uint64_t(0) - 31);
    expect_error(b, "past the end");
  }
  SUBCASE("overlapping tensors") {
    poke<uint64_t>(b, after_string(b, "c.weight") + 4 + 8 + 4, 64);  // inside b.weight (offset 64, 136 bytes)
    expect_error(b, "overlaps");
  }
  SUBCASE("duplicate tensor name") {
    b[after_string(b, "b.weight") - 8] = 'a';
    expect_error(b, "duplicate tensor name 'a.weight'");
  }
  SUBCASE("bad alignment") {
    for (uint32_t a : {0u, 3u, 48u}) {
      GgufWriter w;
      w.add_uint32("general.alignment", 64);
      auto d = w.to_bytes({});
      poke<uint32_t>(d, after_string(d, "general.alignment") + 4, a);
      expect_error(d, "power of two");
    }
    GgufWriter w;
    w.add_string("general.alignment", "32");
    expect_error(w.to_bytes({}), "general.alignment must be an unsigned integer");
  }
}

TEST_CASE("gguf: random byte mutations never crash") {
  SmallFile sf;
  std::mt19937 rng(1234);
  int parsed = 0, rejected = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    auto b = sf.bytes;
    int n_mut = 1 + rng() % 4;
    for (int m = 0; m < n_mut; ++m) {
      size_t pos = rng() % std::min<size_t>(b.size(), 400);  // mostly the header
      switch (rng() % 3) {
        case 0: b[pos] = static_cast<uint8_t>(rng()); break;
        case 1: b[pos] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
        default: b.resize(pos); break;
      }
      if (b.empty()) break;
    }
    try {
      GgufFile f = GgufFile::from_memory(std::move(b), "mut.gguf");
      for (const auto& t : f.tensors()) CHECK(t.offset + t.n_bytes <= f.file_size() - f.data_offset());
      ++parsed;
    } catch (const Error&) {
      ++rejected;
    }
  }
  CHECK(rejected > 0);
  CHECK(parsed + rejected == 3000);
}

TEST_CASE("gguf: fuzzer regression inputs are rejected or parsed, never crash") {
  // tests/fuzz/regressions/: inputs that once crashed or misbehaved (found by tests/fuzz/run_fuzz.sh).
  const std::filesystem::path dir = std::filesystem::path(GRETA_SOURCE_DIR) / "tests/fuzz/regressions";
  REQUIRE(std::filesystem::is_directory(dir));
  int replayed = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".md") continue;
    INFO(e.path().string());
    auto bytes = read_bytes(e.path().string());
    try {
      GgufFile f = GgufFile::from_memory(std::move(bytes), e.path().filename().string());
      for (const auto& t : f.tensors()) CHECK(t.offset + t.n_bytes <= f.file_size() - f.data_offset());
    } catch (const Error& err) {
      CHECK(std::string(err.what()).find(" at offset ") != std::string::npos);
    }
    ++replayed;
  }
  CHECK(replayed > 0);
}
