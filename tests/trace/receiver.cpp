#include "receiver.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

namespace idemproxy::trace::testing {
namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;

const std::string kDir = IDEMPROXY_SOURCE_DIR "/tests/otlp";

void install_once() {
  if (std::filesystem::exists(kDir + "/node_modules/@opentelemetry/otlp-transformer")) return;
  const std::string cmd = "cd '" + kDir + "' && npm ci --no-audit --no-fund --loglevel=error";
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("npm ci failed in " + kDir);
}

}  // namespace

Receiver::Receiver(const std::string& cert_file, const std::string& key_file) {
  install_once();
  const std::string script = kDir + "/receiver.js";  // built before fork: no malloc after
  int out[2];
  if (pipe(out) != 0) throw std::runtime_error("pipe failed");
  pid_ = fork();
  if (pid_ == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    if (cert_file.empty()) {
      execlp("node", "node", script.c_str(), "0", static_cast<char*>(nullptr));
    } else {
      execlp("node", "node", script.c_str(), "0", cert_file.c_str(), key_file.c_str(),
             static_cast<char*>(nullptr));
    }
    _exit(127);
  }
  close(out[1]);
  // Its first line: {"port": N}.
  std::string line;
  char c = 0;
  while (read(out[0], &c, 1) == 1 && c != '\n') line += c;
  close(out[0]);
  if (line.empty()) throw std::runtime_error("the receiver did not start (is node installed?)");
  port_ = nlohmann::json::parse(line).at("port").get<unsigned short>();
}

Receiver::~Receiver() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
}

nlohmann::json Receiver::call(const char* method, const char* target,
                              const std::string& body) const {
  asio::io_context io;
  asio::ip::tcp::socket socket(io);
  socket.connect({asio::ip::make_address("127.0.0.1"), port_});
  bhttp::request<bhttp::string_body> req{bhttp::string_to_verb(method), target, 11};
  req.set(bhttp::field::host, "127.0.0.1");
  req.set(bhttp::field::content_type, "application/json");
  req.body() = body;
  req.prepare_payload();
  bhttp::write(socket, req);
  boost::beast::flat_buffer buffer;
  bhttp::response<bhttp::string_body> res;
  bhttp::read(socket, buffer, res);
  return nlohmann::json::parse(res.body());
}

nlohmann::json Receiver::received() const { return call("GET", "/received", ""); }

void Receiver::answer(const nlohmann::json& mode) const { call("POST", "/mode", mode.dump()); }

unsigned short closed_port() {
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  return acceptor.local_endpoint().port();  // closed when the acceptor goes
}

}  // namespace idemproxy::trace::testing
