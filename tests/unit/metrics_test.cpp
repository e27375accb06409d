#include "idemproxy/ops/metrics.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <set>

using idemproxy::ops::Outcome;

TEST(MetricsReference, EveryOutcomeIsDocumented) {
  std::ifstream in(IDEMPROXY_SOURCE_DIR "/docs/METRICS.md");
  ASSERT_TRUE(in);
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::set<std::string> names;
  for (int i = 0; i <= static_cast<int>(Outcome::shadow_would_reject); ++i) {
    const std::string name = idemproxy::ops::to_string(static_cast<Outcome>(i));
    EXPECT_NE(name, "unknown");
    EXPECT_TRUE(names.insert(name).second) << "duplicate outcome name " << name;
    EXPECT_NE(doc.find("| `" + name + "` |"), std::string::npos) << name << " is undocumented";
  }
}

TEST(Metrics, RenderEscapesRouteLabels) {
  idemproxy::ops::Metrics m;
  m.count_request("we\"ird\\route", Outcome::replayed);
  const auto text = m.render();
  EXPECT_NE(text.find(R"(route="we\"ird\\route",outcome="replayed"} 1)"), std::string::npos)
      << text;
}
