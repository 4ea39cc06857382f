// The stateful property of the reference model. See model_property.h.
#include "props/model_property.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <unordered_map>
#include <ostream>
#include <set>
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

class SilentListener : public rc::detail::TestListener {
 public:
  void onTestCaseFinished(const rc::detail::CaseDescription&) override {}
  void onShrinkTried(const rc::detail::CaseDescription&, bool) override {}
  void onTestFinished(const rc::detail::TestMetadata&, const rc::detail::TestResult&) override {}
};

}  // namespace

void showValue(const SwarmWeights& weights, std::ostream& os) { os << weights.describe(); }

void PlayCommand::apply(PoolShadow& shadow) const { shadow.apply(op_); }

void PlayCommand::show(std::ostream& os) const { os << to_string(op_); }

void PlayCommand::run(const PoolShadow& shadow, PropertySystem& system) const {
  (void)shadow;  // the generators' copy; the shadow observer keeps its own
  if (!system.runner->play(op_)) RC_FAIL(system.runner->failure()->describe());
}

void runner_matches_shadow(const BackendsFactory& make_backends) {
  Result<traces::BackendSet> backends = make_backends();
  if (!backends.ok()) RC_FAIL("the backends cannot be made: " + backends.error().message);
  // SPEC 8's host operations only where every backend has a host arena.
  const bool host_ops = backends->host_ops;
  PoolConfig config = *rc::gen::exec([] {
    RapidCheckChoices choices;
    return generate_config(choices);
  });
  if (host_ops)
    config.host_bytes = *rc::gen::exec([config] {
      RapidCheckChoices choices;
      return generate_host_bytes(choices, config);
    });
  const SwarmWeights weights = *rc::gen::exec([host_ops] {
    RapidCheckChoices choices;
    return draw_swarm(choices, host_ops);
  });
  OpGenOptions options;
  options.host_ops = host_ops;
  // The distribution RapidCheck prints on success: which kinds of pool the cases ran on.
  const bool composite = std::count(config.shape.layers.begin(), config.shape.layers.end(), LayerKind::swa) > 0;
  RC_TAG(config.shape.attention == AttentionKind::mla ? "mla" : composite ? "full+swa" : "full",
         config.shape.name.find("-scaled") != std::string::npos ? "catalogue" : "synthetic",
         config.mode == CompactionMode::lazy ? "lazy" : "eager", config.tables_only ? "tables-only" : "bytes");
  PropertySystem system;
  system.backends = std::move(backends).value();
  system.runner = std::make_unique<traces::Runner>(system.backends.players);
  if (!system.runner->play(Op(BuildPool{config})))
    RC_FAIL("the generated configuration does not build: " + system.runner->failure()->describe());
  system.observers = std::make_unique<PropertyObservers>(config);
  system.observers->attach(*system.runner);
  using CommandPtr = std::shared_ptr<const rc::state::Command<PoolShadow, PropertySystem>>;
  // Generators are kept by RapidCheck past this call while it shrinks: capture by value.
  rc::state::check(PoolShadow(config), system, [weights, options](const PoolShadow& shadow) {
    return rc::gen::exec([shadow, weights, options]() -> CommandPtr {
      RapidCheckChoices choices;
      return std::make_shared<const PlayCommand>(generate_op(choices, shadow, weights, options));
    });
  });
  if (!system.runner->finish()) RC_FAIL(system.runner->failure()->describe());
}

void model_matches_shadow(const ModelFactory& make_model) {
  runner_matches_shadow([&make_model]() -> Result<traces::BackendSet> {
    traces::BackendSet set;
    std::unique_ptr<sim::Model> model = make_model();
    set.players.push_back(traces::model_player(*model));
    set.owned.push_back(std::move(model));
    return set;
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
