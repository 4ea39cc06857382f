// The content oracle's bookkeeping. See content_ledger.h.
#include "sim/content_ledger.h"

#include "core/check.h"
#include "sim/allocation_faults.h"

namespace kvtwin::sim {

ContentLedger::ContentLedger(const std::vector<DenseEntryLayout>& layouts, std::int64_t page_size,
                             std::int64_t num_virtual)
    : page_size_(page_size) {
  for (const DenseEntryLayout& layout : layouts) {
    SideRows s;
    s.layers = layout.parts.front().layer_num;
    s.parts = layout.parts.size();
    s.pages.resize(static_cast<std::size_t>(num_virtual));
    sides_.push_back(std::move(s));
  }
}

std::size_t ContentLedger::index(const SideRows& s, const RowSlot& at) const {
  KVTWIN_CHECK(at.slot >= 0 && at.slot < page_size_ && at.layer < s.layers && at.part < s.parts,
               "a row position inside the page");
  return (static_cast<std::size_t>(at.slot) * s.layers + at.layer) * s.parts + at.part;
}

RowSlot ContentLedger::position(const SideRows& s, std::size_t index) {
  RowSlot at;
  at.part = index % s.parts;
  at.layer = static_cast<std::uint32_t>((index / s.parts) % s.layers);
  at.slot = static_cast<std::int64_t>(index / s.parts / s.layers);
  return at;
}

void ContentLedger::record(std::size_t side, std::int64_t vpage, const RowSlot& at, std::int64_t source_token,
                           std::uint64_t write_number) {
  SideRows& s = sides_.at(side);
  KVTWIN_CHECK(vpage >= 1 && static_cast<std::size_t>(vpage) < s.pages.size(), "a usable virtual page");
  std::vector<WrittenRow>& rows = s.pages[static_cast<std::size_t>(vpage)];
  if (rows.empty()) {
    allocation_point();
    rows.resize(static_cast<std::size_t>(page_size_) * s.layers * s.parts);
  }
  const std::size_t i = index(s, at);
  rows[i] = WrittenRow{source_token, write_number, true};
  s.changed.emplace_back(vpage, i);
}

void ContentLedger::forget_row(std::size_t side, std::int64_t vpage, const RowSlot& at) {
  SideRows& s = sides_.at(side);
  if (vpage < 0 || static_cast<std::size_t>(vpage) >= s.pages.size()) return;
  std::vector<WrittenRow>& rows = s.pages[static_cast<std::size_t>(vpage)];
  if (!rows.empty()) rows[index(s, at)] = WrittenRow{};
}

void ContentLedger::forget_page(std::size_t side, std::int64_t vpage) {
  SideRows& s = sides_.at(side);
  if (vpage < 0 || static_cast<std::size_t>(vpage) >= s.pages.size()) return;
  std::vector<WrittenRow>().swap(s.pages[static_cast<std::size_t>(vpage)]);
}

const WrittenRow* ContentLedger::find(std::size_t side, std::int64_t vpage, const RowSlot& at) const {
  const SideRows& s = sides_.at(side);
  if (vpage < 0 || static_cast<std::size_t>(vpage) >= s.pages.size()) return nullptr;
  const std::vector<WrittenRow>& rows = s.pages[static_cast<std::size_t>(vpage)];
  if (rows.empty()) return nullptr;
  const WrittenRow& row = rows[index(s, at)];
  return row.written ? &row : nullptr;
}

bool ContentLedger::has_rows(std::size_t side, std::int64_t vpage) const {
  const SideRows& s = sides_.at(side);
  if (vpage < 0 || static_cast<std::size_t>(vpage) >= s.pages.size()) return false;
  for (const WrittenRow& r : s.pages[static_cast<std::size_t>(vpage)])
    if (r.written) return true;
  return false;
}

std::vector<WrittenRow> ContentLedger::page_rows(std::size_t side, std::int64_t vpage) const {
  const SideRows& s = sides_.at(side);
  if (vpage < 0 || static_cast<std::size_t>(vpage) >= s.pages.size()) return {};
  return s.pages[static_cast<std::size_t>(vpage)];
}

void ContentLedger::set_page_rows(std::size_t side, std::int64_t vpage, std::vector<WrittenRow> rows) {
  SideRows& s = sides_.at(side);
  KVTWIN_CHECK(vpage >= 1 && static_cast<std::size_t>(vpage) < s.pages.size(), "a usable virtual page");
  KVTWIN_CHECK(rows.empty() || rows.size() == static_cast<std::size_t>(page_size_) * s.layers * s.parts,
               "a page's rows come from a page of the same side");
  s.pages[static_cast<std::size_t>(vpage)] = std::move(rows);
  mark_page_changed(side, vpage);
}

void ContentLedger::mark_page_changed(std::size_t side, std::int64_t vpage) {
  SideRows& s = sides_.at(side);
  if (vpage < 0 || static_cast<std::size_t>(vpage) >= s.pages.size()) return;
  const std::vector<WrittenRow>& rows = s.pages[static_cast<std::size_t>(vpage)];
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (rows[i].written) s.changed.emplace_back(vpage, i);
}

}  // namespace kvtwin::sim
