// EtcdStore: etcd's v3 gRPC API (proto/etcd_rpc.proto) for keys and leases, GET /health over
// libcurl for the health check. Binary keys and values travel as they are: no JSON, no base64,
// on the gateway or in etcd (whose JSON gateway would decode each request and call its own gRPC
// server with it).
#include <curl/curl.h>
#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <mutex>
#include <thread>

#include "controlplane/kv_store.hpp"
#include "etcd_rpc.grpc.pb.h"

namespace fedgate {

namespace pb = etcdserverpb;

struct EtcdStore::Endpoint {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<pb::KV::Stub> kv;
    std::unique_ptr<pb::Lease::Stub> lease;
};

namespace {

std::unique_ptr<EtcdStore::Endpoint> open_endpoint(const std::string& url) {
    const bool tls = url.starts_with("https://");
    const std::string target = url.substr(url.find("://") + 3);
    grpc::ChannelArguments args;
    // A member that comes back is tried again within a second, not after gRPC's default back-off
    // of up to two minutes; and a whole directory (a million records) fits in one answer.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetMaxReceiveMessageSize(-1);
    auto creds = tls ? grpc::SslCredentials(grpc::SslCredentialsOptions{}) : grpc::InsecureChannelCredentials();
    auto ep = std::make_unique<EtcdStore::Endpoint>();
    ep->channel = grpc::CreateCustomChannel(target, creds, args);
    ep->kv = pb::KV::NewStub(ep->channel);
    ep->lease = pb::Lease::NewStub(ep->channel);
    return ep;
}

void set_deadline(grpc::ClientContext& ctx, long timeout_ms) {
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
}

int finish(const grpc::Status& s, std::string& message) {
    message = s.error_message();
    return static_cast<int>(s.error_code());
}

// The codes that say the request itself is wrong (a lease that is gone, too many operations in a
// transaction, an argument etcd does not take): asking another endpoint would not help.
bool refusal(int code) {
    switch (static_cast<grpc::StatusCode>(code)) {
    case grpc::INVALID_ARGUMENT:
    case grpc::NOT_FOUND:
    case grpc::ALREADY_EXISTS:
    case grpc::PERMISSION_DENIED:
    case grpc::FAILED_PRECONDITION:
    case grpc::OUT_OF_RANGE:
    case grpc::RESOURCE_EXHAUSTED:
    case grpc::UNIMPLEMENTED:
    case grpc::UNAUTHENTICATED: return true;
    default: return false;
    }
}

KvEntry entry_of(const pb::KeyValue& kv) {
    return KvEntry{kv.key(), kv.value(), kv.create_revision(), kv.mod_revision(), kv.lease()};
}

void add_put(pb::TxnRequest& t, const std::string& key, const std::string& value, int64_t lease) {
    pb::PutRequest* p = t.add_success()->mutable_request_put();
    p->set_key(key);
    p->set_value(value);
    p->set_lease(lease);
}

// One unary call with the deadline; its gRPC status code, the message in `message`.
template <class Stub, class Request, class Response>
int unary(grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&, Response*), Stub& stub, const Request& q,
          Response& r, long timeout_ms, std::string& message) {
    grpc::ClientContext ctx;
    set_deadline(ctx, timeout_ms);
    r.Clear();
    return finish((stub.*method)(&ctx, q, &r), message);
}

size_t collect(char* data, size_t size, size_t n, void* out) {
    static_cast<std::string*>(out)->append(data, size * n);
    return size * n;
}

}  // namespace

EtcdStore::EtcdStore(std::vector<std::string> endpoints, long timeout_ms, long budget_ms)
    : endpoints_(std::move(endpoints)), timeout_ms_(timeout_ms), budget_ms_(budget_ms) {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
    if (endpoints_.empty()) throw std::invalid_argument("etcd: no endpoints");
    for (const auto& url : endpoints_) {
        if (!url.starts_with("http://") && !url.starts_with("https://"))
            throw std::invalid_argument("etcd: '" + url + "' must start with http:// or https://");
        channels_.push_back(open_endpoint(url));
    }
    curl_ = curl_easy_init();
    if (curl_ == nullptr) throw std::runtime_error("etcd: curl_easy_init failed");
}

EtcdStore::~EtcdStore() {
    if (curl_ != nullptr) curl_easy_cleanup(static_cast<CURL*>(curl_));
}

std::string EtcdStore::describe() const {
    std::string s;
    for (const auto& e : endpoints_) s += (s.empty() ? "" : ",") + e;
    return s;
}

void EtcdStore::call(const char* what, const std::function<int(Endpoint&, long, std::string&)>& rpc) {
    std::lock_guard lk(mu_);
    std::string failures;
    bool reachable = false;
    // Rounds over the endpoints until one answers or the budget is spent: while the store elects a
    // new leader (a second or two after losing one) every endpoint fails, then all serve again.
    const auto start = std::chrono::steady_clock::now();
    const auto spent = [&] {
        return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
    };
    for (;;) {
        failures.clear();
        for (std::size_t i = 0; i < endpoints_.size(); ++i) {
            const std::size_t at = (current_ + i) % endpoints_.size();
            Endpoint& ep = *channels_[at];
            std::string message;
            const int code = rpc(ep, timeout_ms_, message);
            if (code == grpc::OK) {
                current_ = at;
                return;
            }
            if (refusal(code)) throw StoreRefused(endpoints_[at] + " " + what + ": " + message);
            // Reached: etcd itself answered that it cannot serve ("etcdserver: no leader", "request
            // timed out"), or the request went out on a live connection and no answer came in
            // time (etcd without quorum holds a request until its own timeout). Not reached:
            // nothing listens there, or no connection could be made in time.
            const bool connected = ep.channel->GetState(false) == GRPC_CHANNEL_READY;
            if (message.starts_with("etcdserver:") || (code == grpc::DEADLINE_EXCEEDED && connected) ||
                code == grpc::UNKNOWN || code == grpc::INTERNAL || code == grpc::ABORTED || code == grpc::DATA_LOSS)
                reachable = true;
            if (code == grpc::DEADLINE_EXCEEDED) message = "no answer within " + std::to_string(timeout_ms_) + " ms";
            failures += (failures.empty() ? "" : "; ") + endpoints_[at] + ": " + message;
        }
        if (spent() + 100 >= budget_ms_) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    throw StoreUnavailable(std::string("cluster store unavailable (") + failures + ")", reachable);
}

int64_t EtcdStore::grant(int64_t ttl_s) {
    pb::LeaseGrantResponse r;
    pb::LeaseGrantRequest q;
    q.set_ttl(ttl_s);
    call("lease grant", [&](Endpoint& ep, long t, std::string& msg) {
        return unary(&pb::Lease::Stub::LeaseGrant, *ep.lease, q, r, t, msg);
    });
    if (r.id() == 0) throw StoreRefused("lease grant: " + (r.error().empty() ? std::string("no lease ID in the answer") : r.error()));
    return r.id();
}

int64_t EtcdStore::keepalive(int64_t lease) {
    // A streaming call: one request, one answer, then the stream is closed. A lease that is gone
    // is answered with a TTL of 0.
    int64_t ttl = 0;
    call("lease keepalive", [&](Endpoint& ep, long t, std::string& msg) {
        grpc::ClientContext ctx;
        set_deadline(ctx, t);
        auto stream = ep.lease->LeaseKeepAlive(&ctx);
        pb::LeaseKeepAliveRequest q;
        q.set_id(lease);
        pb::LeaseKeepAliveResponse r;
        if (!stream->Write(q) || !stream->Read(&r)) {
            stream->WritesDone();
            const int code = finish(stream->Finish(), msg);
            if (code != grpc::OK) return code;
            // Closed without an answer or an error: not "the lease is gone", which is an answer.
            msg = "the keepalive stream closed without an answer";
            return static_cast<int>(grpc::UNKNOWN);
        }
        ttl = r.ttl();
        ctx.TryCancel();  // done with the stream: its status (CANCELLED) says nothing
        (void)stream->Finish();
        return static_cast<int>(grpc::OK);
    });
    return std::max<int64_t>(ttl, 0);
}

void EtcdStore::revoke(int64_t lease) {
    try {
        pb::LeaseRevokeRequest q;
        q.set_id(lease);
        pb::LeaseRevokeResponse r;
        call("lease revoke", [&](Endpoint& ep, long t, std::string& msg) {
            return unary(&pb::Lease::Stub::LeaseRevoke, *ep.lease, q, r, t, msg);
        });
    } catch (const StoreRefused&) {  // already gone
    }
}

pb::RangeResponse EtcdStore::range_rpc(const pb::RangeRequest& q) {
    pb::RangeResponse r;
    call("range", [&](Endpoint& ep, long t, std::string& msg) { return unary(&pb::KV::Stub::Range, *ep.kv, q, r, t, msg); });
    return r;
}

pb::TxnResponse EtcdStore::txn_rpc(const pb::TxnRequest& q) {
    pb::TxnResponse r;
    call("txn", [&](Endpoint& ep, long t, std::string& msg) { return unary(&pb::KV::Stub::Txn, *ep.kv, q, r, t, msg); });
    return r;
}

std::optional<KvEntry> EtcdStore::get(const std::string& key) {
    pb::RangeRequest q;
    q.set_key(key);
    const auto r = range_rpc(q);
    if (r.kvs().empty()) return std::nullopt;
    return entry_of(r.kvs(0));
}

std::vector<KvEntry> EtcdStore::range(const std::string& prefix, int64_t* revision) {
    pb::RangeRequest q;
    q.set_key(prefix);
    q.set_range_end(prefix_end(prefix));
    const auto r = range_rpc(q);
    if (revision != nullptr) *revision = r.header().revision();
    std::vector<KvEntry> out;
    out.reserve(static_cast<std::size_t>(r.kvs_size()));
    for (const auto& kv : r.kvs()) out.push_back(entry_of(kv));
    return out;
}

PrefixSummary EtcdStore::summarize(const std::string& prefix) {
    // The newest key by mod revision, keys only; etcd's count is the whole range's despite the limit.
    pb::RangeRequest q;
    q.set_key(prefix);
    q.set_range_end(prefix_end(prefix));
    q.set_limit(1);
    q.set_keys_only(true);
    q.set_sort_order(pb::RangeRequest::DESCEND);
    q.set_sort_target(pb::RangeRequest::MOD);
    const auto r = range_rpc(q);
    PrefixSummary s;
    s.count = r.count();
    if (!r.kvs().empty()) s.max_mod_revision = r.kvs(0).mod_revision();
    return s;
}

void EtcdStore::put(const std::vector<std::pair<std::string, std::string>>& kvs, int64_t lease) {
    if (kvs.empty()) return;
    pb::TxnRequest q;
    for (const auto& [k, v] : kvs) add_put(q, k, v, lease);
    txn_rpc(q);
}

void EtcdStore::erase(const std::vector<std::string>& keys) { put_erase({}, keys); }

void EtcdStore::put_erase(const std::vector<std::pair<std::string, std::string>>& puts,
                          const std::vector<std::string>& erases) {
    if (puts.empty() && erases.empty()) return;
    pb::TxnRequest q;
    for (const auto& [k, v] : puts) add_put(q, k, v, 0);
    for (const auto& k : erases) q.add_success()->mutable_request_delete_range()->set_key(k);
    txn_rpc(q);
}

int64_t EtcdStore::put_if(const std::string& key, const std::string& value, int64_t lease, int64_t expect_mod,
                          std::optional<KvEntry>* current) {
    pb::TxnRequest q;
    pb::Compare* c = q.add_compare();
    c->set_key(key);
    c->set_result(pb::Compare::EQUAL);
    if (expect_mod == 0) {
        c->set_target(pb::Compare::CREATE);
        c->set_create_revision(0);
    } else {
        c->set_target(pb::Compare::MOD);
        c->set_mod_revision(expect_mod);
    }
    add_put(q, key, value, lease);
    q.add_failure()->mutable_request_range()->set_key(key);
    const auto r = txn_rpc(q);
    if (r.succeeded()) return r.header().revision();
    if (current != nullptr) {
        *current = std::nullopt;
        if (!r.responses().empty() && r.responses(0).has_response_range() && !r.responses(0).response_range().kvs().empty())
            *current = entry_of(r.responses(0).response_range().kvs(0));
    }
    return 0;
}

bool EtcdStore::erase_if(const std::string& key, const std::string& value) {
    pb::TxnRequest q;
    pb::Compare* c = q.add_compare();
    c->set_key(key);
    c->set_result(pb::Compare::EQUAL);
    c->set_target(pb::Compare::VALUE);
    c->set_value(value);
    q.add_success()->mutable_request_delete_range()->set_key(key);
    return txn_rpc(q).succeeded();
}

std::vector<EndpointHealth> EtcdStore::health() {
    // etcd's GET /health answers {"health":"true"} only when the member has a leader and a
    // quorum read succeeds; the gRPC API has no such single question.
    std::lock_guard lk(mu_);
    std::vector<EndpointHealth> out;
    CURL* c = static_cast<CURL*>(curl_);
    const long timeout_ms = std::min<long>(timeout_ms_, 500);
    for (const auto& url : endpoints_) {
        curl_easy_reset(c);
        std::string body;
        const std::string full = url + "/health";
        curl_easy_setopt(c, CURLOPT_URL, full.c_str());
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
        curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
        long status = 0;
        std::string state = "down";
        const CURLcode rc = curl_easy_perform(c);
        if (rc == CURLE_OK) {
            curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
            const auto j = nlohmann::json::parse(body, nullptr, false);
            state = status == 200 && j.is_object() && j.value("health", "") == "true" ? "up" : "no quorum";
        } else if (rc == CURLE_OPERATION_TIMEDOUT) {
            curl_off_t sent_at = 0;  // connected, and no answer in time: up, but without quorum
            curl_easy_getinfo(c, CURLINFO_PRETRANSFER_TIME_T, &sent_at);
            if (sent_at > 0) state = "no quorum";
        }
        out.push_back({url, state});
    }
    return out;
}

}  // namespace fedgate
