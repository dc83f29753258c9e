// The ps's exchanges through ps 0: scale sharing (ExchangeScales) and the
// multi-round codecs' pre-rounds (ExchangePresums) (ps_service.h).
#include <grpcpp/grpcpp.h>

#include <span>
#include <string>
#include <vector>

#include "ps_service.h"

namespace terngrad::comm {

grpc::Status ParameterServer::Impl::exchange_scales(const Caller& caller, ServerContext* ctx,
                                                    const rpc::ScalesRequest* req, rpc::ScalesReply* reply) {
  std::unique_lock<std::mutex> lock(mu);
  if (ended()) return ended_status();
  if (phase != Phase::kRunning) return detail::before_init("ExchangeScales");
  if (grpc::Status s = authorize_locked(caller, req->replica(), "ExchangeScales", true); !s.ok()) return s;
  // Which variables: every one, or a subset named once each.
  const std::span<const uint32_t> named(req->variables().data(), req->variables().size());
  const std::span<const float> reported(req->scales().data(), req->scales().size());
  std::vector<uint32_t> vars;
  if (std::string bad = scales->select(named, reported, &vars); !bad.empty())
    return grpc::Status(StatusCode::INVALID_ARGUMENT, bad);
  heard(req->replica());
  const int64_t step = req->step();
  auto too_old = [&] {
    return grpc::Status(StatusCode::FAILED_PRECONDITION,
                        "ExchangeScales: step " + std::to_string(step) + " is too old");
  };
  switch (scales->record(req->replica(), step, vars, reported)) {
    case detail::ScaleExchange::Recorded::kTooOld: return too_old();
    case detail::ScaleExchange::Recorded::kNew: cv.notify_all(); break;
    case detail::ScaleExchange::Recorded::kRepeated: break;
  }
  if (long_poll(lock, ctx, [&] { return !scales->kept(step) || scales->complete(step, vars); }))
    return rewound("ExchangeScales", req->replica());
  if (ended()) return ended_status();
  if (!scales->kept(step)) return too_old();
  reply->set_ready(scales->complete(step, vars));
  if (reply->ready()) {
    for (float x : scales->maxima(step, vars)) reply->add_max_scales(x);
  } else {
    for (uint32_t r : scales->missing(step, vars)) reply->add_missing(r);
  }
  return grpc::Status::OK;
}

grpc::Status ParameterServer::Impl::exchange_presums(const Caller& caller, ServerContext* ctx,
                                                     const rpc::PresumRequest* req, rpc::PresumReply* reply) {
  std::unique_lock<std::mutex> lock(mu);
  if (ended()) return ended_status();
  if (phase != Phase::kRunning) return detail::before_init("ExchangePresums");
  if (grpc::Status s = authorize_locked(caller, req->replica(), "ExchangePresums", true); !s.ok()) return s;
  if (!sync) return grpc::Status(StatusCode::FAILED_PRECONDITION, "ExchangePresums: an async run has no pre-rounds");
  const uint32_t round = req->round();
  const std::span<const uint32_t> named(req->variables().data(), req->variables().size());
  const std::span<const float> values(req->values().data(), req->values().size());
  std::vector<uint32_t> vars;
  if (std::string bad = presums->select(round, named, values, &vars); !bad.empty())
    return grpc::Status(StatusCode::INVALID_ARGUMENT, bad);
  const int64_t step = req->step();
  // Only steps a replica may be at: the kept steps around the global step
  // (a late backup replica asks for one summed already). A step far ahead
  // would displace the kept ones.
  const int64_t global = global_step_locked();
  if (step < global - opt.keep_steps || step >= global + opt.keep_steps)
    return grpc::Status(StatusCode::FAILED_PRECONDITION, "ExchangePresums: step " + std::to_string(step) +
                                                             " is outside the run's window [" +
                                                             std::to_string(global - opt.keep_steps) + ", " +
                                                             std::to_string(global + opt.keep_steps) + ")");
  heard(req->replica());
  auto too_old = [&] {
    return grpc::Status(StatusCode::FAILED_PRECONDITION,
                        "ExchangePresums: step " + std::to_string(step) + " is too old");
  };
  switch (presums->record(req->replica(), step, round, vars, values)) {
    case detail::PresumExchange::Recorded::kTooOld: return too_old();
    case detail::PresumExchange::Recorded::kNew: cv.notify_all(); break;
    case detail::PresumExchange::Recorded::kRepeated: break;
  }
  if (long_poll(lock, ctx, [&] { return !presums->kept(step) || presums->complete(step, round, vars); }))
    return rewound("ExchangePresums", req->replica());
  if (ended()) return ended_status();
  if (!presums->kept(step)) return too_old();
  reply->set_ready(presums->complete(step, round, vars));
  if (reply->ready()) {
    for (float x : presums->sums(step, round, vars)) reply->add_sums(x);
  } else {
    for (uint32_t r : presums->missing(step, round, vars)) reply->add_missing(r);
  }
  return grpc::Status::OK;
}

}  // namespace terngrad::comm
