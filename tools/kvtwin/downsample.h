// Downsampling for the HTML reports (html_report.h): a run of a million operations must still
// draw as a few thousand points per chart, without knowing in advance how long the run will be.
//
// DecimatingSeries keeps at most `max_points` points taken on a regular grid of "candidates"
// (ops, or simulator steps): point i was taken at candidate i * stride. It starts with stride 1;
// when it is full and the next point arrives, it keeps every other point (the even ones, which
// lie on the grid of twice the stride), doubles the stride, and appends the new point (which lies
// on the new grid as well). So after any number of candidates it holds between max_points / 2 and
// max_points points, evenly spaced, and the caller only computes a point when due() says so.
//
// What a dropped point carried can be folded into the point kept after it (`merge`), e.g. the
// compaction moves made since the point before: nothing is lost, only coarsened. Points whose
// fields are running totals need no merge (the difference between two kept points is exact).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "core/check.h"

namespace kvtwin::cli {

template <class T>
class DecimatingSeries {
 public:
  // merge(dropped, kept_after): fold what a dropped point carried into the point after it.
  using Merge = std::function<void(T& dropped, T& kept_after)>;

  explicit DecimatingSeries(std::size_t max_points, Merge merge = {})
      : max_points_(max_points), merge_(std::move(merge)) {
    KVTWIN_CHECK(max_points_ >= 2 && max_points_ % 2 == 0,
                 "a decimating series keeps an even number of points, at least 2");
  }

  // Whether the candidate with this 0-based index is to be sampled (candidates come in order).
  bool due(std::uint64_t candidate) const { return candidate == next_candidate(); }

  // Adds the point taken at `candidate`, which must be due.
  void push(std::uint64_t candidate, T point) {
    KVTWIN_CHECK(due(candidate), "a decimating series takes only the candidates it asked for");
    if (points_.size() == max_points_) {
      std::vector<T> kept;
      kept.reserve(max_points_ / 2 + 1);
      for (std::size_t i = 0; i < points_.size(); i += 2) {
        if (merge_ && i > 0) merge_(points_[i - 1], points_[i]);
        kept.push_back(std::move(points_[i]));
      }
      if (merge_) merge_(points_.back(), point);  // the last point (odd) is dropped too
      points_ = std::move(kept);
      stride_ *= 2;
    }
    points_.push_back(std::move(point));
  }

  const std::vector<T>& points() const { return points_; }
  std::vector<T>& points() { return points_; }
  std::uint64_t stride() const { return stride_; }
  std::size_t max_points() const { return max_points_; }
  // The candidate the point at `index` was taken at.
  std::uint64_t candidate_of(std::size_t index) const { return static_cast<std::uint64_t>(index) * stride_; }

 private:
  std::uint64_t next_candidate() const {
    // When full, the next point is due on the doubled grid, which is where points_.size() * stride_ lies.
    return static_cast<std::uint64_t>(points_.size()) * stride_;
  }

  std::size_t max_points_;
  Merge merge_;
  std::vector<T> points_;
  std::uint64_t stride_ = 1;
};

}  // namespace kvtwin::cli
