// The limiter clock: the time a decision is made at, in µs since the Unix epoch. The gateway
// decides on its wall clock (or Redis TIME, clock "redis", read inside the script); `rategate
// replay` decides on the trace's clock, through the same checker and backends.
#pragma once

namespace rategate::limiters {

/// A source of the limiter time (µs since the Unix epoch, fractional µs allowed).
class clock {
  public:
    virtual ~clock() = default;
    /// The time now, µs.
    virtual double now_us() const = 0;
};

/// The gateway's wall clock (system_clock, whole µs).
class wall_clock final : public clock {
  public:
    double now_us() const override;
};

/// The gateway's monotonic clock (steady_clock, whole µs; its epoch is the host's boot, not
/// Unix). The request path's clock under clock "redis": Redis TIME decides, and the gateway
/// only measures local time against it (the over-limit cache's and the leases' offsets,
/// lease expiry, the idle give-back), which a step of the wall clock (NTP, an operator) must
/// not stretch or shrink.
class monotonic_clock final : public clock {
  public:
    double now_us() const override;
};

/// A clock that stands where it is set: replay's trace time, tests.
class manual_clock final : public clock {
  public:
    explicit manual_clock(double t_us = 0) : t_us_(t_us) {}
    double now_us() const override { return t_us_; }
    void set(double t_us) { t_us_ = t_us; }

  private:
    double t_us_;
};

/// The wall clock in µs since the epoch (the "gateway" limiter clock).
double wall_clock_us();

}  // namespace rategate::limiters
