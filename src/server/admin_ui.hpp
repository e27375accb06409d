#pragma once
// The admin page (/ui on admin_listen): plain HTML, JS and CSS from ui/, compiled into
// the binary (cmake/embed_ui.cmake). The files hold no data; the page asks the admin
// API for everything, with the admin token in a header.
#include <string_view>
#include <vector>

#include "server/http_names.hpp"

namespace idemproxy::server {

struct UiFile {
  std::string_view name;  // index.html, app.js, app.css
  std::string_view content_type;
  std::string_view body;
};

const std::vector<UiFile>& ui_files();

}  // namespace idemproxy::server
