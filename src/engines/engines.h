// The engine registry: opening an engine from a store URL, and
// Store::Open on top of it. The only place that knows every engine; core
// and the front ends reach engines through Store::Open and the Engine
// interface alone. Adding an engine: CONTRIBUTING.md.

#ifndef SQLQ_ENGINES_ENGINES_H_
#define SQLQ_ENGINES_ENGINES_H_

#include <memory>
#include <string_view>

#include "core/engine.h"
#include "sqlq/store.h"

namespace sqlq::engines {

// kInvalidArgument for an unknown scheme or malformed URL.
Result<std::unique_ptr<core::Engine>> OpenEngine(std::string_view url,
                                                 const StoreOptions& options);

// Whether `url` names an engine and parses as that engine reads it, without
// opening anything (OpenEngine's errors for a bad URL).
Status CheckUrl(std::string_view url);

}  // namespace sqlq::engines

#endif  // SQLQ_ENGINES_ENGINES_H_
