// Fuzz target: a model spec file (docs/spec-files.md), as `kvtwin layout --spec` and the trace
// commands' --spec read one. It must read, or be refused with a placed message. A shape that reads
// is laid out at several TP sizes and page sizes and rendered as text, JSON and SVG, as
// `kvtwin layout` would; a layout may be refused (a misaligned row, an uneven TP split) but
// rendering must never crash. The shape must survive the writer: written as JSON and read again,
// it is the same shape.
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/catalogue.h"
#include "tools/fuzz/fuzz_support.h"
#include "tools/kvtwin/layout_report.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kvtwin;
  const std::string name = "fuzz.json";
  Result<ModelShape> shape = parse_shape_text(std::string_view(reinterpret_cast<const char*>(data), size), name);
  if (!shape.ok()) {
    fuzz::check_refusal(shape.error(), name);
    return 0;
  }
  Result<ModelShape> again = shape_from_json(shape_to_json(*shape), name);
  if (!again.ok()) fuzz::finding("a shape kvtwin wrote does not read back", again.error().message);
  if (!(again->layers == shape->layers && again->num_kv_heads == shape->num_kv_heads &&
        again->k_head_dim == shape->k_head_dim && again->v_head_dim == shape->v_head_dim &&
        again->dtype == shape->dtype && again->kv_lora_rank == shape->kv_lora_rank))
    fuzz::finding("the shape changed in a write and read", shape_to_json(*shape).dump());
  for (std::uint32_t tp : {1u, 2u, 8u}) {
    for (std::uint64_t page_size : {1u, 16u}) {
      cli::LayoutOptions options;
      options.tp = tp;
      options.page_size = page_size;
      options.total_bytes = std::uint64_t{1} << 30;
      Result<cli::LayoutReport> report = cli::build_layout_report(*shape, options);
      if (!report.ok()) {
        fuzz::check_refusal(report.error(), "");
        continue;
      }
      (void)cli::render_text(*report);
      (void)cli::render_json(*report).dump();
      (void)cli::render_svg(*report);
    }
  }
  return 0;
}
