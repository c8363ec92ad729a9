#include "io/inputs.hpp"

#include <fmt/format.h>

namespace memplan::io {

std::string Origin::to_string() const {
  switch (kind) {
    case OriginKind::kDefault: return note.empty() ? "default" : fmt::format("default ({})", note);
    case OriginKind::kFlag: return fmt::format("flag {}", note);
    case OriginKind::kFile: return loc.to_string();
    case OriginKind::kDetected: return fmt::format("detected ({})", note);
    case OriginKind::kDerived: return fmt::format("derived ({})", note);
  }
  return "?";
}

}  // namespace memplan::io
