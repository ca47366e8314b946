// graph_builder: stream capture into a CUDA graph, with the state rules of cuda.core's
// GraphBuilder. Captured work retains nothing (the documented contract) except host callbacks,
// whose owners are attached to the node found through cuStreamGetCaptureInfo.
#include "cucore/graph/builder.hpp"

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "cucore/error.hpp"
#include "cucore/log.hpp"
#include "graph/graph_state.hpp"
#include "runtime/runtime.hpp"

namespace cucore {

struct graph_builder::impl {
  kind k = kind::primary;
  state st = state::not_started;
  cucore::stream own_stream;                 // when the builder made its stream
  std::shared_ptr<const void> stream_owner;  // keeps a caller's stream alive
  CUstream stream = nullptr;
  cucore::device dev;
  std::shared_ptr<detail::graph_state> graph;  // the graph captured into (null before begin)
};

namespace {

CUstreamCaptureMode to_cuda(capture_mode m) {
  switch (m) {
    case capture_mode::global:
      return CU_STREAM_CAPTURE_MODE_GLOBAL;
    case capture_mode::thread_local_:
      return CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    case capture_mode::relaxed:
      return CU_STREAM_CAPTURE_MODE_RELAXED;
  }
  throw invalid_argument("unknown capture_mode");
}

struct capture_info {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUgraph graph = nullptr;
  const CUgraphNode* deps = nullptr;
  std::size_t count = 0;
};

capture_info query_capture(const detail::driver_api& api, CUstream s) {
  capture_info info;
  cuuint64_t id = 0;
  const CUgraphEdgeData* edges = nullptr;
  detail::check_driver(api.cuStreamGetCaptureInfo(s, &info.status, &id, &info.graph, &info.deps,
                                                  &edges, &info.count),
                       "cuStreamGetCaptureInfo");
  return info;
}

}  // namespace

graph_builder::graph_builder(std::unique_ptr<impl> i) noexcept : impl_(std::move(i)) {}
graph_builder::graph_builder() noexcept = default;
graph_builder::graph_builder(graph_builder&&) noexcept = default;
graph_builder& graph_builder::operator=(graph_builder&& o) noexcept {
  if (this != &o) {
    close();
    impl_ = std::move(o.impl_);
  }
  return *this;
}
graph_builder::~graph_builder() {
  close();
}

graph_builder::graph_builder(const cucore::device& dev) : impl_(std::make_unique<impl>()) {
  impl_->own_stream = cucore::stream(dev);
  impl_->stream = impl_->own_stream.handle();
  impl_->dev = dev;
}

graph_builder::graph_builder(const cucore::stream& s) : impl_(std::make_unique<impl>()) {
  impl_->stream_owner = s.owner();  // throws for an empty stream
  impl_->stream = s.handle();
  impl_->dev = s.device();
}

namespace {

graph_builder::impl& open(const std::unique_ptr<graph_builder::impl>& i) {
  if (!i || i->st == graph_builder::state::closed) {
    throw invalid_argument("the graph_builder has been closed");
  }
  return *i;
}

void require_capturing(const graph_builder::impl& i, const char* what) {
  if (i.st != graph_builder::state::capturing) {
    throw invalid_argument(std::string(what) +
                           " needs a builder that is building: call begin_building() first");
  }
}

}  // namespace

graph_builder::kind graph_builder::builder_kind() const {
  return open(impl_).k;
}

graph_builder::state graph_builder::builder_state() const {
  return impl_ ? impl_->st : state::closed;
}

stream_ref graph_builder::stream() const {
  const impl& i = open(impl_);
  return stream_ref(i.stream, i.dev);
}

graph_builder& graph_builder::begin_building(capture_mode mode) {
  impl& i = open(impl_);
  if (i.st == state::capturing) throw invalid_argument("the graph_builder is already building");
  if (i.st == state::ended) {
    throw invalid_argument(
        "a graph_builder cannot resume building after end_building(); use a new builder");
  }
  const auto& api = detail::graph_driver();
  detail::scoped_context scope(api, i.dev.ordinal());
  if (i.k == kind::conditional_body) {
    detail::check_usable(*i.graph);
    detail::check_driver(api.cuStreamBeginCaptureToGraph(i.stream, i.graph->graph, nullptr, nullptr,
                                                         0, to_cuda(mode)),
                         "cuStreamBeginCaptureToGraph");
    i.st = state::capturing;
    return *this;
  }
  // The state exists before the capture starts, so nothing can fail between the two.
  auto s = std::make_shared<detail::graph_state>();
  s->device = i.dev.ordinal();
  detail::check_driver(api.cuStreamBeginCapture(i.stream, to_cuda(mode)), "cuStreamBeginCapture");
  i.st = state::capturing;
  try {
    s->graph = query_capture(api, i.stream).graph;
  } catch (...) {
    CUgraph g = nullptr;
    api.cuStreamEndCapture(i.stream, &g);
    if (g != nullptr) api.cuGraphDestroy(g);
    i.st = state::not_started;
    throw;
  }
  s->owns = true;
  i.graph = std::move(s);
  return *this;
}

bool graph_builder::is_building() const {
  const impl& i = open(impl_);
  const auto& api = detail::graph_driver();
  const capture_info info = query_capture(api, i.stream);
  if (info.status == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
    throw cuda_error(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
                     "cuStreamGetCaptureInfo",
                     "the capture was invalidated by an operation not allowed during capture; "
                     "end_building() reports it and the builder cannot be completed");
  }
  return info.status == CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

graph_builder& graph_builder::end_building() {
  impl& i = open(impl_);
  if (i.st != state::capturing) throw invalid_argument("the graph_builder is not building");
  if (i.k == kind::forked) {
    throw invalid_argument(
        "a forked graph_builder does not end the capture: join() it into its primary builder, "
        "then call end_building() there");
  }
  const auto& api = detail::graph_driver();
  detail::scoped_context scope(api, i.dev.ordinal());
  CUgraph g = nullptr;
  const CUresult r = api.cuStreamEndCapture(i.stream, &g);
  i.st = state::ended;
  if (r != CUDA_SUCCESS) {
    // The driver discards an invalidated capture's graph: never destroy it a second time.
    if (i.k == kind::primary && g == nullptr) {
      i.graph->owns = false;
      i.graph->invalid = true;
    }
    detail::check_driver(r, "cuStreamEndCapture");
  }
  return *this;
}

graph graph_builder::complete(const graph_instantiate_options& options) const {
  const impl& i = open(impl_);
  if (i.st != state::ended) {
    throw invalid_argument(
        "the graph_builder has not finished building: call end_building() first");
  }
  return detail::instantiate_graph(detail::graph_driver(), *i.graph, options);
}

void graph_builder::debug_dot_print(const std::filesystem::path& path,
                                    const graph_dot_options& options) const {
  const impl& i = open(impl_);
  if (i.st != state::ended) {
    throw invalid_argument(
        "the graph_builder has not finished building: call end_building() first");
  }
  detail::dot_print(detail::graph_driver(), *i.graph, path, options);
}

namespace {

// Makes `primary` wait for what each of `forks` captured (an event recorded on each). Throws on
// the first failure; forks already waited for stay joined, which a later join repeats harmlessly.
void wait_for_forks(const graph_builder::impl& primary, std::span<graph_builder::impl* const> forks,
                    std::span<event> done) {
  for (std::size_t n = 0; n < forks.size(); ++n) {
    done[n].record(stream_ref(forks[n]->stream, forks[n]->dev));
    stream_ref(primary.stream, primary.dev).wait(done[n]);
  }
}

}  // namespace

std::vector<graph_builder> graph_builder::split(unsigned count) {
  impl& i = open(impl_);
  if (count < 2) {
    throw invalid_argument("split count must be at least 2, got " + std::to_string(count));
  }
  require_capturing(i, "split");
  // Everything that can fail without touching the capture first: the streams and events. A fork
  // that has joined the capture must be joined back before end_building() can succeed, so none
  // may be dropped half-made.
  event fork_point(i.dev, event_options{.timing = false});
  std::vector<graph_builder> out;
  std::vector<impl*> forks;
  std::vector<event> rejoin;
  out.reserve(count - 1);
  forks.reserve(count - 1);
  rejoin.reserve(count - 1);
  for (unsigned n = 1; n < count; ++n) {
    auto f = std::make_unique<impl>();
    f->k = kind::forked;
    f->own_stream = cucore::stream(i.dev);
    f->stream = f->own_stream.handle();
    f->dev = i.dev;
    f->graph = i.graph;
    forks.push_back(f.get());
    out.push_back(graph_builder(std::move(f)));
    rejoin.emplace_back(i.dev, event_options{.timing = false});
  }
  fork_point.record(stream_ref(i.stream, i.dev));
  std::size_t joined = 0;
  try {
    for (impl* f : forks) {
      f->own_stream.wait(fork_point);  // the fork joins the capture
      f->st = state::capturing;
      ++joined;
    }
  } catch (...) {
    try {
      wait_for_forks(i, std::span(forks).first(joined), std::span(rejoin).first(joined));
    } catch (const std::exception& e) {
      log(log_level::warning,
          std::string("graph_builder::split failed part-way and could not join its forks back "
                      "(the capture cannot end): ") +
              e.what());
    }
    throw;
  }
  return out;
}

void graph_builder::join(std::vector<graph_builder>&& others) {
  impl& i = open(impl_);
  require_capturing(i, "join");
  if (others.empty()) throw invalid_argument("join needs at least one other graph_builder");
  std::vector<impl*> forks;
  forks.reserve(others.size());
  for (graph_builder& o : others) {
    impl& oi = open(o.impl_);
    if (&oi == &i) throw invalid_argument("a graph_builder cannot join itself");
    require_capturing(oi, "join");
    if (oi.graph != i.graph) {
      throw invalid_argument("join: a builder captures another graph (split it from this one)");
    }
    if (std::find(forks.begin(), forks.end(), &oi) != forks.end()) {
      throw invalid_argument("join: the same graph_builder is given twice");
    }
    forks.push_back(&oi);
  }
  // The events first; the builders are closed only once every wait is in, so on failure the
  // caller still holds every one of them, capturing, to join again.
  std::vector<event> done;
  done.reserve(others.size());
  for (std::size_t n = 0; n < others.size(); ++n)
    done.emplace_back(i.dev, event_options{.timing = false});
  wait_for_forks(i, forks, done);
  for (graph_builder& o : others) o.close();
}

bool graph_builder::is_join_required() const {
  return open(impl_).k == kind::forked;
}

graph_condition graph_builder::create_condition(std::optional<unsigned> default_value) const {
  const impl& i = open(impl_);
  if (!i.graph) {
    throw invalid_argument(
        "create_condition needs the builder's graph: call begin_building() first");
  }
  return detail::create_condition(detail::graph_driver(), *i.graph, default_value);
}

std::vector<graph_builder> graph_builder::conditional(const graph_condition& c, conditional_kind k,
                                                      unsigned count) {
  impl& i = open(impl_);
  require_capturing(i, to_string(k));
  const auto& s = i.graph;
  detail::check_usable(*s);
  const auto& api = detail::graph_driver();
  detail::scoped_context scope(api, i.dev.ordinal());
  std::vector<CUgraph> bodies(count);
  CUgraphNodeParams p = detail::conditional_params(*s, c, k, count, bodies.data());

  // Everything that can fail, first: body states, their builders' streams, the metadata entry.
  detail::node_meta meta;
  meta.conditional = k;
  meta.condition = c;
  std::vector<graph_builder> out;
  for (unsigned n = 0; n < count; ++n) {
    auto body = detail::make_body(*s);
    auto b = std::make_unique<impl>();
    b->k = kind::conditional_body;
    b->own_stream = cucore::stream(i.dev);
    b->stream = b->own_stream.handle();
    b->dev = i.dev;
    b->graph = detail::view_of(s, body.get());
    meta.bodies.push_back(std::move(body));
    out.push_back(graph_builder(std::move(b)));
  }
  s->meta.reserve_one();

  const capture_info info = query_capture(api, i.stream);
  CUgraphNode node = nullptr;
  detail::check_driver(api.cuGraphAddNode(&node, info.graph, info.deps, nullptr, info.count, &p),
                       "cuGraphAddNode");
  const CUresult r = api.cuStreamUpdateCaptureDependencies(i.stream, &node, nullptr, 1,
                                                           CU_STREAM_SET_CAPTURE_DEPENDENCIES);
  if (r != CUDA_SUCCESS) {
    api.cuGraphDestroyNode(node);
    detail::check_driver(r, "cuStreamUpdateCaptureDependencies");
  }
  for (unsigned n = 0; n < count; ++n) {
    meta.bodies[n]->graph = p.conditional.phGraph_out[n];
    meta.bodies[n]->owner_node = node;
  }
  s->meta.emplace(node, std::move(meta));
  return out;
}

graph_builder graph_builder::if_then(const graph_condition& c) {
  return std::move(conditional(c, conditional_kind::if_then, 1)[0]);
}

std::pair<graph_builder, graph_builder> graph_builder::if_else(const graph_condition& c) {
  auto b = conditional(c, conditional_kind::if_else, 2);
  return {std::move(b[0]), std::move(b[1])};
}

graph_builder graph_builder::while_loop(const graph_condition& c) {
  return std::move(conditional(c, conditional_kind::while_loop, 1)[0]);
}

std::vector<graph_builder> graph_builder::switch_(const graph_condition& c, unsigned count) {
  if (count == 0) throw invalid_argument("switch_ needs at least one branch (count 0 given)");
  return conditional(c, conditional_kind::switch_, count);
}

namespace {

void embed_into_capture(graph_builder::impl& i,
                        const std::shared_ptr<detail::graph_state>& source) {
  require_capturing(i, "embed");
  const auto& s = i.graph;
  const auto& api = detail::graph_driver();
  // A view is embedded through a whole copy of it, which holds its owners.
  const auto whole = detail::whole_copy_of_view(api, *source);
  const detail::graph_state& from = whole ? *whole : *source;
  detail::scoped_context scope(api, i.dev.ordinal());
  detail::node_meta meta;
  auto body = detail::make_body(*s);
  detail::graph_state* body_ptr = body.get();
  meta.bodies.push_back(std::move(body));
  s->meta.reserve_one();

  const capture_info info = query_capture(api, i.stream);
  CUgraphNode node = nullptr;
  detail::check_driver(
      api.cuGraphAddChildGraphNode(&node, info.graph, info.deps, info.count, from.graph),
      "cuGraphAddChildGraphNode");
  try {
    detail::check_driver(api.cuGraphChildGraphNodeGetGraph(node, &body_ptr->graph),
                         "cuGraphChildGraphNodeGetGraph");
    detail::import_clone_metadata(api, *body_ptr, from);
    detail::check_driver(api.cuStreamUpdateCaptureDependencies(i.stream, &node, nullptr, 1,
                                                               CU_STREAM_SET_CAPTURE_DEPENDENCIES),
                         "cuStreamUpdateCaptureDependencies");
  } catch (...) {
    api.cuGraphDestroyNode(node);
    throw;
  }
  body_ptr->owner_node = node;
  s->meta.emplace(node, std::move(meta));
}

}  // namespace

void graph_builder::embed(const graph_builder& child) {
  impl& i = open(impl_);
  const impl& c = open(child.impl_);
  if (c.st != state::ended) {
    throw invalid_argument("embed: the child graph_builder has not finished building");
  }
  embed_into_capture(i, c.graph);
}

void graph_builder::embed(const cucore::graph_definition& child) {
  impl& i = open(impl_);
  const auto& s = detail::graph_access::state(child);
  if (!s) throw invalid_argument("embed: the child graph_definition is empty");
  embed_into_capture(i, s);
}

void graph_builder::callback_erased(host_function fn, void* data,
                                    std::shared_ptr<const void> fn_owner,
                                    std::shared_ptr<const void> data_owner) {
  impl& i = open(impl_);
  if (fn == nullptr) throw invalid_argument("the host callback is a null function pointer");
  if (i.st != state::capturing) {
    throw invalid_argument(
        "callback needs a builder that is building: call begin_building() first");
  }
  const auto& s = i.graph;
  const auto& api = detail::graph_driver();
  detail::scoped_context scope(api, i.dev.ordinal());
  s->meta.reserve_one();
  detail::owner_list owners;
  owners.push(std::move(fn_owner));
  owners.push(std::move(data_owner));
  detail::prepared_attachment prepared(api, detail::attachment_holder(*s), std::move(owners));
  detail::check_driver(api.cuLaunchHostFunc(i.stream, fn, data), "cuLaunchHostFunc");
  // The host node is the capture's only dependency now. If it cannot be identified the owners
  // stay with the graph, unattached to a node, until the graph is destroyed; never released early.
  try {
    const capture_info info = query_capture(api, i.stream);
    if (info.count == 1 && !s->meta.contains(info.deps[0])) {
      detail::node_meta meta;
      prepared.commit(meta);
      s->meta.emplace(info.deps[0], std::move(meta));
      return;
    }
  } catch (const cuda_error&) {
  }
  prepared.commit_anonymous();
}

void graph_builder::callback(host_function fn, std::span<const std::byte> user_data) {
  if (user_data.empty()) return callback_erased(fn, nullptr, nullptr, nullptr);
  std::shared_ptr<void> copy = detail::copy_user_data(user_data);
  void* data = copy.get();
  callback_erased(fn, data, nullptr, std::move(copy));
}

void graph_builder::callback(host_function fn, void* user_data) {
  callback_erased(fn, user_data, nullptr, nullptr);
}

cucore::graph_definition graph_builder::graph_definition() const {
  if (!impl_ || impl_->st == state::closed) {
    throw invalid_argument("graph_definition(): the graph_builder has been closed");
  }
  const impl& i = *impl_;
  if (i.k == kind::forked) {
    throw invalid_argument(
        "graph_definition() is unavailable on a forked graph_builder; use its primary builder");
  }
  if (i.st == state::capturing) {
    throw invalid_argument(
        "graph_definition() is unavailable while capture is in progress; call end_building() "
        "first");
  }
  if (i.k == kind::primary && i.st == state::not_started) {
    throw invalid_argument(
        "graph_definition() is unavailable before begin_building() on a primary graph_builder: "
        "no graph exists yet");
  }
  return detail::graph_access::definition(i.graph);
}

void graph_builder::close() noexcept {
  if (!impl_) return;
  impl& i = *impl_;
  if (i.st == state::capturing && i.k != kind::forked && detail::driver_alive()) {
    try {
      const auto& api = detail::graph_driver();
      detail::scoped_context scope(api, i.dev.ordinal(), std::nothrow);
      CUgraph g = nullptr;
      const CUresult r = api.cuStreamEndCapture(i.stream, &g);
      if (r != CUDA_SUCCESS && i.k == kind::primary && g == nullptr && i.graph) {
        i.graph->owns = false;
        i.graph->invalid = true;
      }
    } catch (...) {
    }
  }
  impl_.reset();
}

const std::shared_ptr<detail::graph_state>& detail::graph_access::builder_state(
    const graph_builder& b) {
  if (!b.impl_ || !b.impl_->graph) throw invalid_argument("the graph_builder has no graph");
  return b.impl_->graph;
}

capture_guard::~capture_guard() {
  graph_builder* b = builder_;
  if (b == nullptr) return;
  try {
    if (b->builder_state() == graph_builder::state::capturing) b->end_building();
  } catch (const std::exception& e) {
    log(log_level::warning, std::string("capture_guard: ending the capture failed: ") + e.what());
  }
}

}  // namespace cucore
