// The content oracle's bookkeeping (docs/decisions.md "Content oracle"): for every row of every
// bound virtual page, the identity last written there (source token and write number; the
// sub-pool, layer and part are the row's position). Keyed by *virtual* page, so it never
// changes when compaction moves a page: verify() reads each remembered row back through v2p,
// which is what shows that a move carried the bytes with the page.
//
// How it works: one vector of rows per virtual page and side, created on the first write to the
// page and dropped when the page is freed. Rows of a page that was never written take no room.
// It holds no bytes and knows nothing about physical placement.
#pragma once

#include <cstdint>
#include <vector>

#include "core/layout.h"

namespace kvtwin::sim {

struct WrittenRow {
  std::int64_t source_token = 0;
  std::uint64_t write_number = 0;
  bool written = false;
  bool operator==(const WrittenRow&) const = default;
};

// Position of one row inside a virtual page of one side.
struct RowSlot {
  std::int64_t slot = 0;  // token slot inside the page, 0 .. page_size - 1
  std::uint32_t layer = 0;
  std::size_t part = 0;
};

class ContentLedger {
 public:
  ContentLedger() = default;
  ContentLedger(const std::vector<DenseEntryLayout>& layouts, std::int64_t page_size, std::int64_t num_virtual);

  void record(std::size_t side, std::int64_t vpage, const RowSlot& at, std::int64_t source_token,
              std::uint64_t write_number);
  void forget_row(std::size_t side, std::int64_t vpage, const RowSlot& at);
  // A freed page (or a page whose SWA half left the window) forgets every row.
  void forget_page(std::size_t side, std::int64_t vpage);

  // The row last written at a position, or nullptr when nothing is remembered there.
  const WrittenRow* find(std::size_t side, std::int64_t vpage, const RowSlot& at) const;
  // Whether any row of the page is remembered.
  bool has_rows(std::size_t side, std::int64_t vpage) const;

  // A page's rows as a whole (empty when nothing is remembered), indexed as row_position() says:
  // what a transfer carries to a host page and back (docs/host_arena.md "Content").
  std::vector<WrittenRow> page_rows(std::size_t side, std::int64_t vpage) const;
  // Replaces a page's rows (a load-back's intent); every written row counts as changed.
  void set_page_rows(std::size_t side, std::int64_t vpage, std::vector<WrittenRow> rows);
  // Counts every remembered row of a page as changed (its bytes landed: verify_changed reads them).
  void mark_page_changed(std::size_t side, std::int64_t vpage);
  // The position of row `index` of a page's rows.
  RowSlot row_position(std::size_t side, std::size_t index) const { return position(sides_.at(side), index); }

  // Calls fn(vpage, RowSlot, WrittenRow) for every remembered row of a side, in ascending order.
  template <class Fn>
  void for_each_row(std::size_t side, Fn&& fn) const {
    const SideRows& s = sides_.at(side);
    for (std::size_t v = 0; v < s.pages.size(); ++v) {
      const std::vector<WrittenRow>& rows = s.pages[v];
      for (std::size_t i = 0; i < rows.size(); ++i)
        if (rows[i].written) fn(static_cast<std::int64_t>(v), position(s, i), rows[i]);
    }
  }

  // Calls fn(vpage, RowSlot, WrittenRow) for every remembered row of one page of a side.
  template <class Fn>
  void for_each_row_of_page(std::size_t side, std::int64_t vpage, Fn&& fn) const {
    const SideRows& s = sides_.at(side);
    if (vpage < 0 || static_cast<std::size_t>(vpage) >= s.pages.size()) return;
    const std::vector<WrittenRow>& rows = s.pages[static_cast<std::size_t>(vpage)];
    for (std::size_t i = 0; i < rows.size(); ++i)
      if (rows[i].written) fn(vpage, position(s, i), rows[i]);
  }

  // Calls fn(vpage, RowSlot, WrittenRow) for the rows of a side recorded since clear_changes()
  // that are still remembered (repeats allowed): the incremental verify re-reads only these (and
  // a moved page's first and last rows).
  template <class Fn>
  void for_each_changed_row(std::size_t side, Fn&& fn) const {
    const SideRows& s = sides_.at(side);
    for (const auto& [vpage, i] : s.changed) {
      const std::vector<WrittenRow>& rows = s.pages[static_cast<std::size_t>(vpage)];
      if (i < rows.size() && rows[i].written) fn(vpage, position(s, i), rows[i]);
    }
  }
  // Calls fn(vpage, RowSlot, WrittenRow) for the first and the last remembered row of a page.
  template <class Fn>
  void for_first_and_last_row_of_page(std::size_t side, std::int64_t vpage, Fn&& fn) const {
    const SideRows& s = sides_.at(side);
    if (vpage < 0 || static_cast<std::size_t>(vpage) >= s.pages.size()) return;
    const std::vector<WrittenRow>& rows = s.pages[static_cast<std::size_t>(vpage)];
    std::size_t first = rows.size(), last = rows.size();
    for (std::size_t i = 0; i < rows.size(); ++i)
      if (rows[i].written) {
        if (first == rows.size()) first = i;
        last = i;
      }
    if (first == rows.size()) return;
    fn(vpage, position(s, first), rows[first]);
    if (last != first) fn(vpage, position(s, last), rows[last]);
  }
  void clear_changes() {
    for (SideRows& s : sides_) s.changed.clear();
  }

 private:
  struct SideRows {
    std::uint32_t layers = 0;
    std::size_t parts = 0;
    std::vector<std::vector<WrittenRow>> pages;  // by virtual page; empty when nothing is written
    std::vector<std::pair<std::int64_t, std::size_t>> changed;  // (vpage, row index): see for_each_changed_row()
  };
  std::size_t index(const SideRows& s, const RowSlot& at) const;
  static RowSlot position(const SideRows& s, std::size_t index);

  std::int64_t page_size_ = 1;
  std::vector<SideRows> sides_;
};

}  // namespace kvtwin::sim
