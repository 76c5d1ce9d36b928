// The paged KV cache's bookkeeping (the engine owns it; backends only hold the page pool's memory). Every layer's K
// and V pool is n_pages pages of page_size positions; a sequence's positions 0, 1, ... fill the pages of its page
// list in order (position p: page pages[p / page_size], row p % page_size). Page 0 is never handed out: it is the
// sink that padding tokens write to.
//
// Sharing: fork() gives a new sequence the FULL pages of another's prefix (reference counts); a page shared by
// several sequences is never written again, because sequences only append and a shared page is full. What a fork
// does not share (the partial last page) its owner recomputes: copy-on-write at page granularity, where the copy
// is the recomputation of fewer than page_size tokens instead of a device copy (vLLM's prefix caching shares only
// full blocks for the same reason). truncate() that cuts into a shared page gives that page up the same way.
//
// Sliding windows: a pool used only by sliding-window layers lets a sequence give up the pages that lie wholly
// before its window (forget_before): their page-list entries become 0 (the sink) and the pages go back to the free
// list, so such a pool holds about a window of pages per sequence however long the sequences grow.
//
// Memory: the pool grows geometrically (capacity doubles, up to max_pages, the budget) as pages are used; the
// engine re-prepares its plans when capacity() changes. The free list and the reference counts grow with the pool
// (a few bytes a page); nothing here allocates per step otherwise.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace greta::engine {

using SeqId = int32_t;

class KvCache {
public:
  // initial_pages and max_pages count page 0 too (so at least 2).
  KvCache(int64_t page_size, int64_t initial_pages, int64_t max_pages);

  int64_t page_size() const { return page_size_; }
  int64_t capacity() const { return capacity_; }   // pages in the pool now (the plans' n_pages)
  int64_t max_pages() const { return max_pages_; }  // the budget
  int64_t used_pages() const { return used_; }      // pages held by at least one sequence
  // Pages a new allocation can still get, growing the pool up to the budget.
  int64_t available_pages() const { return max_pages_ - 1 - used_; }
  int64_t pages_for(int64_t positions) const { return (positions + page_size_ - 1) / page_size_; }

  SeqId create();                        // an empty sequence
  // A new sequence holding the full pages of src's first `positions` positions (rounded down to whole pages);
  // returns it with length() = the shared positions.
  SeqId fork(SeqId src, int64_t positions);
  void release(SeqId seq);               // frees its pages (those no other sequence holds)
  bool live(SeqId seq) const;
  int64_t live_sequences() const { return live_count_; }

  int64_t length(SeqId seq) const;       // positions filled
  std::span<const int32_t> pages(SeqId seq) const;
  // Makes room for `new_length` positions (pages allocated, pool grown as needed); false, with nothing changed,
  // when the budget cannot hold them. The sequence's length becomes new_length.
  bool extend(SeqId seq, int64_t new_length);
  // Shortens to at most new_length positions; a shared page that would be written again is given up too. Returns
  // the length kept (<= new_length).
  int64_t truncate(SeqId seq, int64_t new_length);
  // Grows the pool to at least `pages` (capped by the budget) now, instead of as pages are taken (benches that must
  // not re-prepare plans inside a timed run).
  void grow(int64_t pages);
  // Gives up the sequence's pages that hold only positions before `pos` (their entries become 0); the length stays.
  void forget_before(SeqId seq, int64_t pos);
  // Positions from which on the sequence still has its pages (a multiple of page_size; 0 when nothing was given up).
  int64_t kept_from(SeqId seq) const;
  // The pool row of position `pos` of a sequence (pos < length).
  int64_t row(SeqId seq, int64_t pos) const;
  int32_t page_refs(int32_t page) const { return refs_[size_t(page)]; }

private:
  struct Sequence {
    std::vector<int32_t> pages;
    int64_t length = 0;
    int64_t forgotten = 0;  // leading entries given up (0)
    bool live = false;
  };
  Sequence& at(SeqId seq);
  const Sequence& at(SeqId seq) const;
  int32_t take_page();  // from the free list, growing the pool; -1 when the budget is spent
  void drop_page(int32_t page);

  int64_t page_size_, capacity_, max_pages_;
  int64_t used_ = 0, live_count_ = 0;
  std::vector<int32_t> refs_;        // [capacity]
  std::vector<int32_t> free_;        // free pages below capacity_ (a stack: the lowest page is taken first)
  std::vector<Sequence> seqs_;       // by SeqId; released slots are reused
  std::vector<SeqId> free_ids_;
};

}  // namespace greta::engine
