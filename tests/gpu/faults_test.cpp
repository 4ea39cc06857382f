// Fault switches by name (gpu/faults.h): all off by default, each settable by its name, unknown
// names refused with the list of known ones. Runs everywhere (no device needed).
#include <gtest/gtest.h>

#include "gpu/faults.h"

namespace kvtwin::gpu {
namespace {

TEST(Faults, AllOffByDefault) {
  const Faults faults;
  EXPECT_FALSE(faults.any());
  EXPECT_EQ(to_string(faults), "");
}

TEST(Faults, EachNameSetsExactlyOneSwitch) {
  ASSERT_EQ(fault_names().size(), 15u);
  for (std::string_view name : fault_names()) {
    Faults faults;
    ASSERT_TRUE(set_fault(faults, name).ok()) << name;
    EXPECT_TRUE(faults.any()) << name;
    EXPECT_EQ(to_string(faults), std::string(name)) << "exactly one switch, and it prints by its name";
    // Round trip through the comma-separated form.
    Result<Faults> parsed = parse_faults(to_string(faults));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, faults);
  }
}

TEST(Faults, UnknownNameListsTheKnownOnes) {
  Faults faults;
  const Status s = set_fault(faults, "skip_rebinds");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().kind, ErrorKind::invalid_argument);
  EXPECT_NE(s.error().message.find("skip_rebind,"), std::string::npos) << s.error().message;
  EXPECT_FALSE(faults.any()) << "a refused name changes nothing";
  EXPECT_FALSE(parse_faults("no_mark_check,bogus").ok());
}

TEST(Faults, ListParsesSeveral) {
  Result<Faults> parsed = parse_faults("no_mark_check,,int32_offsets");
  ASSERT_TRUE(parsed.ok());
  EXPECT_TRUE(parsed->no_mark_check);
  EXPECT_TRUE(parsed->int32_offsets);
  EXPECT_FALSE(parsed->skip_rebind);
  EXPECT_EQ(to_string(*parsed), "no_mark_check,int32_offsets");
}

}  // namespace
}  // namespace kvtwin::gpu
