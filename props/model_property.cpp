// The stateful property of the reference model. See model_property.h.
#include "props/model_property.h"

#include <algorithm>
#include <cstdlib>
#include <unordered_map>
#include <ostream>
#include <sstream>

#include <rapidcheck.h>

#include "props/config_gen.h"
#include "props/op_gen.h"
#include "props/rc_choices.h"

namespace kvtwin {
void showValue(const PoolConfig& config, std::ostream& os) { os << to_string(Op(BuildPool{config})); }
}  // namespace kvtwin

namespace kvtwin::props {
namespace {

std::string join(const std::vector<std::int64_t>& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out + "]";
}

// The first field in which two pools' tables differ, in words; empty when equal.
std::string table_difference(const PoolTables& model, const PoolTables& shadow) {
  if (model.sides.size() != shadow.sides.size()) return "the model has " + std::to_string(model.sides.size()) + " sides";
  for (std::size_t i = 0; i < model.sides.size(); ++i) {
    const SideTables& a = model.sides[i];
    const SideTables& b = shadow.sides[i];
    const std::string side = "side '" + a.name + "' ";
    for (std::size_t v = 0; v < std::max(a.v2p.size(), b.v2p.size()); ++v)
      if (v >= a.v2p.size() || v >= b.v2p.size() || a.v2p[v] != b.v2p[v])
        return side + "v2p[" + std::to_string(v) + "]: model " + (v < a.v2p.size() ? std::to_string(a.v2p[v]) : "-") +
               ", shadow " + (v < b.v2p.size() ? std::to_string(b.v2p[v]) : "-");
    if (a.p2v != b.p2v) return side + "p2v: model " + join(a.p2v) + ", shadow " + join(b.p2v);
    if (a.free_queue != b.free_queue) return side + "free queue: model " + join(a.free_queue) + ", shadow " + join(b.free_queue);
    if (a.watermark != b.watermark)
      return side + "watermark: model " + std::to_string(a.watermark) + ", shadow " + std::to_string(b.watermark);
    if (a.holes != b.holes) return side + "holes: model " + join(a.holes) + ", shadow " + join(b.holes);
    if (a.allocated_pages != b.allocated_pages)
      return side + "allocated: model " + std::to_string(a.allocated_pages) + ", shadow " + std::to_string(b.allocated_pages);
  }
  return {};
}

class SilentListener : public rc::detail::TestListener {
 public:
  void onTestCaseFinished(const rc::detail::CaseDescription&) override {}
  void onShrinkTried(const rc::detail::CaseDescription&, bool) override {}
  void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}
};

}  // namespace

void showValue(const SwarmWeights& weights, std::ostream& os) { os << weights.describe(); }

void ModelCommand::apply(PoolShadow& shadow) const { shadow.apply(op_); }

void ModelCommand::show(std::ostream& os) const { os << to_string(op_); }

void ModelCommand::run(const PoolShadow& shadow, sim::Model& model) const {
  PoolShadow next = shadow;
  const Expectation expected = next.apply(op_);
  const Result<PoolTables> before = model.tables();
  RC_ASSERT(before.ok());
  // A refusal must leave everything as it was: hash the state when the shadow expects one.
  const std::uint64_t digest_before = expected.result.ok() ? 0 : model.state_digest();
  const OpResult actual = model.apply(op_);
  if (auto m = mismatch(expected, actual)) RC_FAIL(to_string(op_) + ": " + *m);
  if (!actual.ok() && model.state_digest() != digest_before)
    RC_FAIL(to_string(op_) + " was refused (" + actual.error().message + ") but changed the model's state");
  const PoolTables after = *model.tables();
  const std::string policy = policy_violation(op_, *before, after, actual, model.config().mode);
  if (!policy.empty()) RC_FAIL(to_string(op_) + ": " + policy);
  const std::string differs = table_difference(after, next.tables());
  if (!differs.empty()) RC_FAIL(to_string(op_) + ": tables differ from the shadow's: " + differs);
  const Status verified = model.verify();
  if (!verified.ok()) RC_FAIL(to_string(op_) + ": verify() failed: " + verified.error().message);
}

void model_matches_shadow(const ModelFactory& make_model) {
  const PoolConfig config = *rc::gen::exec([] {
    RapidCheckChoices choices;
    return generate_config(choices);
  });
  const SwarmWeights weights = *rc::gen::exec([] {
    RapidCheckChoices choices;
    return draw_swarm(choices);
  });
  // The distribution RapidCheck prints on success: which kinds of pool the cases ran on.
  const bool composite = std::count(config.shape.layers.begin(), config.shape.layers.end(), LayerKind::swa) > 0;
  RC_TAG(config.shape.attention == AttentionKind::mla ? "mla" : composite ? "full+swa" : "full",
         config.shape.name.find("-scaled") != std::string::npos ? "catalogue" : "synthetic",
         config.mode == CompactionMode::lazy ? "lazy" : "eager", config.tables_only ? "tables-only" : "bytes");
  std::unique_ptr<sim::Model> model = make_model();
  const OpResult built = model->apply(BuildPool{config});
  if (!built.ok()) RC_FAIL("the generated configuration does not build: " + built.error().message);
  using CommandPtr = std::shared_ptr<const rc::state::Command<PoolShadow, sim::Model>>;
  // Generators are kept by RapidCheck past this call while it shrinks: capture by value.
  rc::state::check(PoolShadow(config), *model, [weights](const PoolShadow& shadow) {
    return rc::gen::exec([shadow, weights]() -> CommandPtr {
      RapidCheckChoices choices;
      return std::make_shared<const ModelCommand>(generate_op(choices, shadow, weights));
    });
  });
}

PropertyParams params_from_environment(const PropertyParams& defaults) {
  if (std::getenv("RC_PARAMS") == nullptr) return defaults;
  const rc::detail::TestParams& p = rc::detail::configuration().testParams;
  return PropertyParams{p.seed, p.maxSuccess, p.maxSize, p.disableShrinking};
}

PropertyRun run_model_property(const std::string& id, const ModelFactory& make_model, const PropertyParams& params) {
  rc::detail::TestParams tp;
  tp.seed = params.seed;
  tp.maxSuccess = params.max_success;
  tp.maxSize = params.max_size;
  tp.disableShrinking = params.disable_shrinking;
  rc::detail::TestMetadata metadata;
  metadata.id = id;
  metadata.description = id;
  SilentListener listener;
  // RapidCheck's global configuration (which announces a seed of its own) is read only when
  // RC_PARAMS is set: it carries the reproduce string of a failure.
  const bool from_environment = std::getenv("RC_PARAMS") != nullptr;
  const rc::detail::TestResult result =
      rc::detail::checkTestable([&] { model_matches_shadow(make_model); }, metadata, tp, listener,
                                from_environment ? rc::detail::configuration().reproduce
                                                 : std::unordered_map<std::string, rc::detail::Reproduce>{});
  PropertyRun run;
  run.seed = params.seed;
  std::ostringstream message;
  rc::detail::printResultMessage(result, message);
  run.message = message.str();
  rc::detail::SuccessResult success;
  rc::detail::FailureResult failure;
  if (result.match(success)) {
    run.passed = true;
    run.cases = success.numSuccess;
  } else if (result.match(failure)) {
    run.cases = failure.numSuccess;
    rc::detail::Configuration config;
    config.testParams = tp;
    config.reproduce = {{id, failure.reproduce}};
    run.reproduce = rc::detail::configToMinimalString(config);
    for (const auto& [type, value] : failure.counterExample)
      if (type.find("Command") != std::string::npos)
        run.counterexample_commands = static_cast<std::size_t>(std::count(value.begin(), value.end(), '\n'));
  }
  return run;
}

}  // namespace kvtwin::props
