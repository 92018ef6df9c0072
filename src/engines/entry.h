// What each engine gives the registry (engines.cc), declared once for every
// engine: its EngineEntry, which each engine defines beside its URL parser
// (EntryOf). Its URL and parameters: docs/engines/.

#ifndef SQLQ_ENGINES_ENTRY_H_
#define SQLQ_ENGINES_ENTRY_H_

#include <memory>
#include <string_view>
#include <utility>

#include "core/engine.h"
#include "sqlq/store.h"

namespace sqlq::engines {

// An engine's Open and CheckUrl. `url` as the registry passes it:
// SQLite's after "sqlite:", the others' whole.
struct EngineEntry {
  // kInvalidArgument for a malformed URL or an unknown parameter.
  Result<std::unique_ptr<core::Engine>> (*open)(std::string_view url,
                                                const StoreOptions& options);
  // Whether `url` parses (as open reads it), without connecting.
  Status (*check_url)(std::string_view url);
};

// Each engine's, defined by it with EntryOf.
namespace sqlite {
EngineEntry Entry();
}
namespace postgres {
EngineEntry Entry();
}
namespace mysql {
EngineEntry Entry();
}

// The entry of an engine E whose settings `Parse` reads from its URL
// (Result<Settings> Parse(std::string_view)) and which is built from them
// and the store's clock (E(Settings, std::shared_ptr<Clock>)); open
// initialises it (its schema brought up to date, or created with
// options.create_if_missing).
template <auto Parse, class E>
EngineEntry EntryOf() {
  return {
      .open = [](std::string_view url, const StoreOptions& options)
          -> Result<std::unique_ptr<core::Engine>> {
        auto settings = Parse(url);
        if (!settings.ok()) return settings.status();
        auto engine = std::make_unique<E>(std::move(*settings), options.clock);
        Status s = engine->Init(options.create_if_missing);
        if (!s.ok()) return s;
        return std::unique_ptr<core::Engine>(std::move(engine));
      },
      .check_url = [](std::string_view url) { return Parse(url).status(); },
  };
}

}  // namespace sqlq::engines

#endif  // SQLQ_ENGINES_ENTRY_H_
