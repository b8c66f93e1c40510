// A lease's unused permits going back to the shared counter (SPEC §2 `sync`, idle give-back):
// the C++ twin of limiters/lua/give_back/give_back.lua (tests/redis/test_parity.cpp holds them
// to the same states). Why no limit is exceeded is written at the top of the script.
#pragma once

#include "limiters/algorithms/layer.hpp"

namespace rategate::limiters {

/// Gives `permits` unused leased permits back to a layer's `state` (its values; the layer's
/// state as stored, rules concatenated). `granted_at_us`: the limiter-clock time (µs) of the
/// earliest grant among them. token_bucket: each rule's tokens rise by `permits`, capped at its
/// burst, never lowered; fixed_window: each rule's count falls by `permits` (not below 0) while
/// its stored window is still the window of `granted_at_us`; other algorithms: unchanged.
/// Returns true when the state changed.
bool give_back_permits(const layer_spec& spec, layer_state& state, double permits,
                       double granted_at_us);

}  // namespace rategate::limiters
