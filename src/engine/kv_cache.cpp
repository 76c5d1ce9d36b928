#include "engine/kv_cache.h"

#include <algorithm>

#include "core/error.h"

namespace greta::engine {

KvCache::KvCache(int64_t page_size, int64_t initial_pages, int64_t max_pages)
    : page_size_(page_size), capacity_(std::min(initial_pages, max_pages)), max_pages_(max_pages) {
  GRETA_CHECK(page_size >= 1 && initial_pages >= 2 && max_pages >= 2, "KV cache of ", max_pages, " pages of ", page_size);
  refs_.assign(size_t(capacity_), 0);
  refs_[0] = 1;  // the sink is never handed out
  for (int64_t p = capacity_ - 1; p >= 1; --p) free_.push_back(int32_t(p));
}

KvCache::Sequence& KvCache::at(SeqId seq) {
  GRETA_CHECK(seq >= 0 && size_t(seq) < seqs_.size() && seqs_[size_t(seq)].live, "no live sequence ", seq);
  return seqs_[size_t(seq)];
}

const KvCache::Sequence& KvCache::at(SeqId seq) const {
  GRETA_CHECK(seq >= 0 && size_t(seq) < seqs_.size() && seqs_[size_t(seq)].live, "no live sequence ", seq);
  return seqs_[size_t(seq)];
}

bool KvCache::live(SeqId seq) const { return seq >= 0 && size_t(seq) < seqs_.size() && seqs_[size_t(seq)].live; }

SeqId KvCache::create() {
  SeqId id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = SeqId(seqs_.size());
    seqs_.emplace_back();
  }
  Sequence& s = seqs_[size_t(id)];
  s.pages.clear();
  s.length = 0;
  s.forgotten = 0;
  s.live = true;
  ++live_count_;
  return id;
}

SeqId KvCache::fork(SeqId src, int64_t positions) {
  GRETA_CHECK(positions >= 0 && positions <= at(src).length, "fork of ", positions, " positions");
  const int64_t full = positions / page_size_;
  const SeqId id = create();  // may reallocate seqs_: look src up again below
  const Sequence& from = at(src);
  Sequence& s = seqs_[size_t(id)];
  s.pages.assign(from.pages.begin(), from.pages.begin() + full);
  for (int32_t p : s.pages)
    if (p > 0) ++refs_[size_t(p)];
  s.forgotten = std::min(from.forgotten, full);
  s.length = full * page_size_;
  return id;
}

void KvCache::release(SeqId seq) {
  Sequence& s = at(seq);
  for (int32_t p : s.pages)
    if (p > 0) drop_page(p);
  s.pages.clear();
  s.length = 0;
  s.live = false;
  --live_count_;
  free_ids_.push_back(seq);
}

int64_t KvCache::length(SeqId seq) const { return at(seq).length; }

std::span<const int32_t> KvCache::pages(SeqId seq) const { return at(seq).pages; }

void KvCache::grow(int64_t pages) {
  const int64_t grown = std::min(max_pages_, pages);
  if (grown <= capacity_) return;
  refs_.resize(size_t(grown), 0);
  // New pages go under the old free ones: the lowest free page is still taken first.
  free_.insert(free_.begin(), size_t(grown - capacity_), 0);
  for (int64_t p = capacity_; p < grown; ++p) free_[size_t(grown - 1 - p)] = int32_t(p);
  capacity_ = grown;
}

int32_t KvCache::take_page() {
  if (free_.empty()) {
    if (capacity_ >= max_pages_) return -1;
    grow(capacity_ * 2);
  }
  const int32_t page = free_.back();
  free_.pop_back();
  GRETA_CHECK(refs_[size_t(page)] == 0, "page ", page, " handed out twice");
  refs_[size_t(page)] = 1;
  ++used_;
  return page;
}

void KvCache::drop_page(int32_t page) {
  GRETA_CHECK(page > 0 && refs_[size_t(page)] > 0, "page ", page, " released twice");
  if (--refs_[size_t(page)] == 0) {
    free_.push_back(page);
    --used_;
  }
}

bool KvCache::extend(SeqId seq, int64_t new_length) {
  Sequence& s = at(seq);
  GRETA_CHECK(new_length >= s.length, "extend to ", new_length, " positions, the sequence has ", s.length);
  if (new_length == s.length) return true;
  const int64_t need = pages_for(new_length) - int64_t(s.pages.size());
  if (need > available_pages()) return false;
  for (int64_t i = 0; i < need; ++i) s.pages.push_back(take_page());
  s.length = new_length;
  return true;
}

int64_t KvCache::truncate(SeqId seq, int64_t new_length) {
  Sequence& s = at(seq);
  int64_t keep = std::clamp<int64_t>(new_length, 0, s.length);
  // The page that position `keep` would be written to must be this sequence's alone.
  if (keep % page_size_ != 0 && refs_[size_t(s.pages[size_t(keep / page_size_)])] > 1) keep -= keep % page_size_;
  while (int64_t(s.pages.size()) > pages_for(keep)) {
    if (s.pages.back() > 0) drop_page(s.pages.back());
    s.pages.pop_back();
  }
  s.forgotten = std::min(s.forgotten, int64_t(s.pages.size()));
  s.length = keep;
  return keep;
}

void KvCache::forget_before(SeqId seq, int64_t pos) {
  Sequence& s = at(seq);
  const int64_t end = std::min<int64_t>(std::max<int64_t>(pos, 0) / page_size_, int64_t(s.pages.size()));
  for (int64_t i = s.forgotten; i < end; ++i) {
    if (s.pages[size_t(i)] > 0) drop_page(s.pages[size_t(i)]);
    s.pages[size_t(i)] = 0;
  }
  s.forgotten = std::max(s.forgotten, end);
}

int64_t KvCache::kept_from(SeqId seq) const { return at(seq).forgotten * page_size_; }

int64_t KvCache::row(SeqId seq, int64_t pos) const {
  const Sequence& s = at(seq);
  GRETA_CHECK(pos >= 0 && pos < int64_t(s.pages.size()) * page_size_, "position ", pos, " of a sequence of ", s.length);
  return int64_t(s.pages[size_t(pos / page_size_)]) * page_size_ + pos % page_size_;
}

}  // namespace greta::engine
