// The reference decode attention. See attention.h.
#include "sim/attention.h"

#include <cstring>

#include "core/check.h"
#include "core/det_math.h"
#include "core/oracle.h"

namespace kvtwin::sim {

float element_as_float(std::span<const std::uint8_t> row, DType dtype, std::uint64_t index) {
  const std::uint32_t is = dtype_size_bytes(dtype);
  KVTWIN_CHECK((index + 1) * is <= row.size(), "an element inside its row");
  const std::uint8_t* p = row.data() + index * is;
  switch (dtype) {
    case DType::bf16: {
      std::uint16_t v = 0;
      std::memcpy(&v, p, 2);
      return det::bf16_to_float(v);
    }
    case DType::fp16: {
      std::uint16_t v = 0;
      std::memcpy(&v, p, 2);
      return det::fp16_to_float(v);
    }
    case DType::fp8_e4m3:
      return det::fp8e4m3_to_float(*p);
    case DType::fp32: {
      std::uint32_t v = 0;
      std::memcpy(&v, p, 4);
      return det::from_bits(v);
    }
  }
  return 0.0f;
}

std::vector<std::uint8_t> reference_decode_attention(const PoolBytes& bytes, const AttentionShape& shape,
                                                     const std::vector<std::vector<std::int64_t>>& table,
                                                     const std::vector<std::int64_t>& lengths,
                                                     std::uint64_t query_seed) {
  const AttentionRowAt row_at = [&bytes, &shape](std::int64_t pt, std::size_t part) {
    return bytes.row(*shape.layout, pt, part, shape.local_layer);
  };
  return reference_decode_attention(row_at, shape, table, lengths, query_seed);
}

std::vector<std::uint8_t> reference_decode_attention(const AttentionRowAt& row_at, const AttentionShape& shape,
                                                     const std::vector<std::vector<std::int64_t>>& table,
                                                     const std::vector<std::int64_t>& lengths,
                                                     std::uint64_t query_seed) {
  const DenseEntryLayout& layout = *shape.layout;
  const DensePart& k_part = layout.parts.at(shape.k_part);
  const DensePart& v_part = layout.parts.at(shape.v_part);
  KVTWIN_CHECK(shape.kv_heads > 0 && shape.query_heads % shape.kv_heads == 0, "query heads are a multiple of KV heads");
  const std::uint32_t group = shape.query_heads / shape.kv_heads;
  const std::size_t bs = lengths.size();
  std::vector<float> out(bs * shape.query_heads * shape.v_head_dim, 0.0f);
  const float scale = det::div(1.0f, det::sqrt(static_cast<float>(shape.k_head_dim)));

  for (std::size_t b = 0; b < bs; ++b) {
    const auto len = static_cast<std::size_t>(lengths[b]);
    // The physical token of position j, read through the page table and the paged view:
    // table[b][j // ps] * ps + j % ps (the in-page token stride is the whole entry, SPEC 2).
    std::vector<std::int64_t> tokens(len);
    for (std::size_t j = 0; j < len; ++j)
      tokens[j] = table[b][j / static_cast<std::size_t>(shape.page_size)] * shape.page_size +
                  static_cast<std::int64_t>(j) % shape.page_size;
    for (std::uint32_t h = 0; h < shape.query_heads; ++h) {
      const std::uint32_t g = h / group;  // KV head of this query head
      std::vector<float> q(shape.k_head_dim);
      for (std::uint32_t d = 0; d < shape.k_head_dim; ++d)
        q[d] = oracle_query_value(query_seed, static_cast<std::uint32_t>(b), h, d);
      // s_j = (sum over d in order of q[d] * k_j[d]) * scale
      std::vector<float> s(len);
      for (std::size_t j = 0; j < len; ++j) {
        const auto k_row = row_at(tokens[j], shape.k_part);
        float acc = 0.0f;
        for (std::uint32_t d = 0; d < shape.k_head_dim; ++d)
          acc = det::add(acc, det::mul(q[d], element_as_float(k_row, k_part.dtype, std::uint64_t{g} * shape.k_head_dim + d)));
        s[j] = det::mul(acc, scale);
      }
      // m: the running maximum of s_j in order.
      float m = len > 0 ? s[0] : 0.0f;
      for (std::size_t j = 1; j < len; ++j) m = s[j] > m ? s[j] : m;
      // p_j = exp(s_j - m); l = the in-order sum of p_j.
      std::vector<float> p(len);
      float l = 0.0f;
      for (std::size_t j = 0; j < len; ++j) {
        p[j] = det::exp_nonpositive(det::sub(s[j], m));
        l = det::add(l, p[j]);
      }
      // out[e] = (sum over j in order of p_j * v_j[e]) / l. V of MLA is a prefix of the latent
      // row, so its head stride is the whole row (one KV head).
      const std::uint64_t v_head_stride = v_part.head_dim();
      for (std::uint32_t e = 0; e < shape.v_head_dim; ++e) {
        float acc = 0.0f;
        for (std::size_t j = 0; j < len; ++j) {
          const auto v_row = row_at(tokens[j], shape.v_part);
          acc = det::add(acc, det::mul(p[j], element_as_float(v_row, v_part.dtype, g * v_head_stride + e)));
        }
        out[(b * shape.query_heads + h) * shape.v_head_dim + e] = det::div(acc, l);
      }
    }
  }
  std::vector<std::uint8_t> result(out.size() * sizeof(float));
  if (!result.empty()) std::memcpy(result.data(), out.data(), result.size());  // (a replay of no request has none)
  return result;
}

}  // namespace kvtwin::sim
