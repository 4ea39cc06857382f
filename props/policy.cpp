// The policy's postconditions, checked on one step of a pool. See policy.h.
#include "props/policy.h"

#include <algorithm>
#include <map>
#include <set>

namespace kvtwin::props {
namespace {

std::string join(const std::vector<std::int64_t>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out + "]";
}

// The physical pages an allocation of `k` pages must take on a side (SPEC 4, 4.2): the lowest
// holes first, then band pages at the watermark, ascending.
std::vector<std::int64_t> expected_pages(const SideTables& before, bool grows_up, std::size_t k) {
  std::vector<std::int64_t> pages;
  for (std::int64_t h : before.holes)
    if (pages.size() < k) pages.push_back(h);
  const auto rest = static_cast<std::int64_t>(k - pages.size());
  const std::int64_t first = grows_up ? before.watermark : before.watermark - rest + 1;
  for (std::int64_t i = 0; i < rest; ++i) pages.push_back(first + i);
  return pages;
}

}  // namespace

std::string policy_violation(const Op& op, const PoolTables& before, const PoolTables& after, const OpResult& result,
                             CompactionMode mode) {
  if (!result.ok()) return {};
  // Allocation: the queue-front virtual pages, bound on every side to the pages the policy
  // names; alloc_many binds its requests one after another.
  std::vector<std::vector<std::int64_t>> requests;
  if (const auto* a = std::get_if<Allocated>(&result.value())) requests.push_back(a->pages);
  if (const auto* a = std::get_if<AllocatedMany>(&result.value())) requests = a->pages;
  std::vector<std::int64_t> vpages;
  for (const auto& r : requests) vpages.insert(vpages.end(), r.begin(), r.end());
  if (!vpages.empty()) {
    const std::vector<std::int64_t>& queue = before.sides[0].free_queue;
    if (vpages.size() > queue.size() || !std::equal(vpages.begin(), vpages.end(), queue.begin()))
      return "alloc bound virtual pages " + join(vpages) + ", not the queue front of " + join(queue);
    for (std::size_t i = 0; i < after.sides.size(); ++i) {
      SideTables side = before.sides[i];  // walked forward request by request
      for (const auto& request : requests) {
        const std::vector<std::int64_t> want = expected_pages(side, i == 0, request.size());
        std::vector<std::int64_t> got;
        for (std::int64_t v : request) got.push_back(after.sides[i].v2p[static_cast<std::size_t>(v)]);
        if (got != want)
          return "alloc bound side '" + after.sides[i].name + "' pages " + join(got) + " for virtual pages " +
                 join(request) + "; the policy takes " + join(want);
        const auto from_holes = std::min(side.holes.size(), request.size());
        side.holes.erase(side.holes.begin(), side.holes.begin() + static_cast<std::ptrdiff_t>(from_holes));
        const auto band = static_cast<std::int64_t>(request.size() - from_holes);
        side.watermark += i == 0 ? band : -band;
      }
    }
  }
  // Compaction: per side, ascending distinct sources beyond the new watermark, ascending
  // distinct destinations inside it, no page moved twice, each page carrying its virtual id.
  if (const auto* c = std::get_if<Compaction>(&result.value())) {
    if (mode == CompactionMode::lazy && !std::holds_alternative<Flush>(op) && !c->moves.empty())
      return "a lazy free moved pages; lazy mode leaves holes until flush";
    std::map<std::string, std::vector<PageMove>> by_side;
    for (const PageMove& m : c->moves) by_side[m.sub_pool].push_back(m);
    for (const auto& [name, moves] : by_side) {
      std::size_t i = 0;
      while (i < after.sides.size() && after.sides[i].name != name) ++i;
      if (i == after.sides.size()) return "a move names an unknown sub-pool '" + name + "'";
      const bool up = i == 0;
      const std::int64_t wm = after.sides[i].watermark;
      std::set<std::int64_t> touched;
      for (std::size_t k = 0; k < moves.size(); ++k) {
        const PageMove& m = moves[k];
        if (k > 0 && (m.src <= moves[k - 1].src || m.dst <= moves[k - 1].dst))
          return "side '" + name + "' moves are not ascending in source and destination";
        if (!touched.insert(m.src).second || !touched.insert(m.dst).second)
          return "side '" + name + "' moves page " + std::to_string(m.src) + " or " + std::to_string(m.dst) + " twice";
        if (up ? !(m.src >= wm && m.dst < wm) : !(m.src <= wm && m.dst > wm))
          return "side '" + name + "' move " + std::to_string(m.src) + "->" + std::to_string(m.dst) +
                 " does not cross the new watermark " + std::to_string(wm);
        const std::int64_t v = before.sides[i].p2v[static_cast<std::size_t>(m.src)];
        if (v < 1 || after.sides[i].p2v[static_cast<std::size_t>(m.dst)] != v)
          return "side '" + name + "' page " + std::to_string(m.src) + " did not carry its virtual page to " +
                 std::to_string(m.dst);
      }
    }
  }
  return {};
}

}  // namespace kvtwin::props
