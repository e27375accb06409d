#pragma once
// Tests that read what the code under test writes to standard output (the access log).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace idemproxy::testing {

// Runs `log` with standard output sent to a file, and returns what it wrote.
template <class F>
std::string captured_stdout(F log) {
  char path[] = "/tmp/idemproxy-stdout.XXXXXX";
  const int file = ::mkstemp(path);
  EXPECT_GE(file, 0);
  std::fflush(stdout);
  const int saved = ::dup(STDOUT_FILENO);
  ::dup2(file, STDOUT_FILENO);
  log();
  std::fflush(stdout);
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
  ::close(file);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  ::unlink(path);
  return text.str();
}

}  // namespace idemproxy::testing
