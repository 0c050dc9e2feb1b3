// The gateway group's store: etcd's v3 JSON gateway over libcurl, and the in-memory model.
#include "controlplane/kv_store.hpp"

#include <curl/curl.h>
#include <nlohmann/json.hpp>
#include <openssl/evp.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>

namespace fedgate {

using nlohmann::json;

std::string base64_encode(const std::string& raw) {
    std::string out(4 * ((raw.size() + 2) / 3) + 1, '\0');
    const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                  reinterpret_cast<const unsigned char*>(raw.data()), static_cast<int>(raw.size()));
    out.resize(static_cast<std::size_t>(n));
    return out;
}

std::optional<std::string> base64_decode(const std::string& text) {
    if (text.size() % 4 != 0) return std::nullopt;
    std::string out(text.size() / 4 * 3 + 1, '\0');
    const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                  reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
    if (n < 0) return std::nullopt;
    // EVP_DecodeBlock counts the padding as zero bytes.
    std::size_t len = static_cast<std::size_t>(n);
    if (!text.empty() && text.back() == '=') --len;
    if (text.size() >= 2 && text[text.size() - 2] == '=') --len;
    out.resize(len);
    return out;
}

std::string prefix_end(const std::string& prefix) {
    std::string end = prefix;
    while (!end.empty()) {
        auto& c = reinterpret_cast<unsigned char&>(end.back());
        if (c != 0xff) {
            ++c;
            return end;
        }
        end.pop_back();
    }
    return std::string(1, '\0');  // every key
}

// ---------------------------------------------------------------------------------------------
// etcd

namespace {

// The gateway writes int64 fields as strings; accept numbers too.
int64_t i64(const json& j, const char* name) {
    const auto it = j.find(name);
    if (it == j.end() || it->is_null()) return 0;
    if (it->is_number_integer()) return it->get<int64_t>();
    if (it->is_string()) {
        try {
            return std::stoll(it->get<std::string>());
        } catch (const std::exception&) {
            return 0;
        }
    }
    return 0;
}

KvEntry entry_of(const json& kv) {
    KvEntry e;
    e.key = base64_decode(kv.value("key", "")).value_or("");
    e.value = base64_decode(kv.value("value", "")).value_or("");
    e.create_revision = i64(kv, "create_revision");
    e.mod_revision = i64(kv, "mod_revision");
    e.lease = i64(kv, "lease");
    return e;
}

std::vector<KvEntry> entries_of(const json& r) {
    std::vector<KvEntry> out;
    if (const auto it = r.find("kvs"); it != r.end() && it->is_array())
        for (const auto& kv : *it) out.push_back(entry_of(kv));
    return out;
}

json put_op(const std::string& key, const std::string& value, int64_t lease) {
    json p{{"key", base64_encode(key)}, {"value", base64_encode(value)}};
    if (lease != 0) p["lease"] = std::to_string(lease);
    return {{"request_put", p}};
}

size_t collect(char* data, size_t size, size_t n, void* out) {
    static_cast<std::string*>(out)->append(data, size * n);
    return size * n;
}

// gRPC status codes that mean "this endpoint cannot serve now": another may.
bool unavailable_code(int64_t code) {
    return code == 4 /* deadline exceeded */ || code == 14 /* unavailable */ || code == 13 /* internal */ ||
           code == 1 /* cancelled */ || code == 10 /* aborted */;
}

}  // namespace

EtcdStore::EtcdStore(std::vector<std::string> endpoints, long timeout_ms, long budget_ms)
    : endpoints_(std::move(endpoints)), timeout_ms_(timeout_ms), budget_ms_(budget_ms) {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
    if (endpoints_.empty()) throw std::invalid_argument("etcd: no endpoints");
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

EtcdStore::Reply EtcdStore::post_one(const std::string& url, const std::string& path, const std::string& body,
                                     long timeout_ms) {
    CURL* c = static_cast<CURL*>(curl_);
    curl_easy_reset(c);
    Reply r;
    const std::string full = url + path;
    curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, full.c_str());
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, std::min<long>(timeout_ms, 500));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r.body);
    if (body.empty()) {
        curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    } else {
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
    }
    const CURLcode rc = curl_easy_perform(c);
    if (rc == CURLE_OK) {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    } else {
        r.error = curl_easy_strerror(rc);
        // A deadline passed after the connection was made: the endpoint is there but not answering
        // (etcd without quorum holds requests until its own timeout). Say so with status -1.
        if (rc == CURLE_OPERATION_TIMEDOUT) {
            curl_off_t sent_at = 0;  // when the request was about to go out: 0 if it never connected
            curl_easy_getinfo(c, CURLINFO_PRETRANSFER_TIME_T, &sent_at);
            if (sent_at > 0) r.status = -1;
        }
    }
    curl_slist_free_all(headers);
    return r;
}

std::optional<std::string> EtcdStore::try_each(const std::string& path, const std::string& body, std::string& failures,
                                               bool& reachable) {
    for (std::size_t i = 0; i < endpoints_.size(); ++i) {
        const std::size_t at = (current_ + i) % endpoints_.size();
        const Reply r = post_one(endpoints_[at], path, body, timeout_ms_);
        std::string why;
        if (r.status == 200) {
            current_ = at;
            return r.body;
        }
        if (r.status == 0) {
            why = r.error;
        } else if (r.status < 0) {
            reachable = true;
            why = "no answer within " + std::to_string(timeout_ms_) + " ms";
        } else {
            reachable = true;
            json e = json::parse(r.body, nullptr, false);
            const std::string msg = e.is_object() ? e.value("message", e.value("error", r.body)) : r.body;
            const int64_t code = e.is_object() ? i64(e, "code") : 0;
            // 4xx: the request itself was refused (a lease that is gone: 404, code 5). 5xx: this
            // endpoint cannot serve now (no leader: 503 code 14; timed out: 500 code 2); another may.
            if (r.status < 500 && !unavailable_code(code)) throw StoreRefused(endpoints_[at] + path + ": " + msg);
            why = msg;
        }
        failures += (failures.empty() ? "" : "; ") + endpoints_[at] + ": " + why;
    }
    return std::nullopt;
}

std::string EtcdStore::call(const std::string& path, const std::string& body) {
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
        if (auto answer = try_each(path, body, failures, reachable)) return std::move(*answer);
        if (spent() + 100 >= budget_ms_) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    throw StoreUnavailable("cluster store unavailable (" + failures + ")", reachable);
}

int64_t EtcdStore::grant(int64_t ttl_s) {
    const json r = json::parse(call("/v3/lease/grant", json{{"TTL", std::to_string(ttl_s)}}.dump()));
    const int64_t id = i64(r, "ID");
    if (id == 0) throw StoreRefused("lease grant: " + r.value("error", std::string("no lease ID in the answer")));
    return id;
}

int64_t EtcdStore::keepalive(int64_t lease) {
    // A streaming call: one request in the body, one result back.
    const std::string text = call("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump());
    // The answer may be several JSON lines; the first result says it.
    const std::string first = text.substr(0, text.find('\n'));
    const json r = json::parse(first, nullptr, false);
    if (!r.is_object()) throw StoreUnavailable("lease keepalive: unreadable answer", true);
    if (const auto it = r.find("error"); it != r.end()) {
        const int64_t code = it->is_object() ? i64(*it, "grpc_code") : 0;
        if (unavailable_code(code)) throw StoreUnavailable("lease keepalive: " + it->dump(), true);
        throw StoreRefused("lease keepalive: " + it->dump());
    }
    return i64(r.value("result", json::object()), "TTL");
}

void EtcdStore::revoke(int64_t lease) {
    try {
        call("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump());
    } catch (const StoreRefused&) {  // already gone
    }
}

std::optional<KvEntry> EtcdStore::get(const std::string& key) {
    const json r = json::parse(call("/v3/kv/range", json{{"key", base64_encode(key)}}.dump()));
    auto e = entries_of(r);
    if (e.empty()) return std::nullopt;
    return e.front();
}

std::vector<KvEntry> EtcdStore::range(const std::string& prefix, int64_t* revision) {
    const json r = json::parse(
        call("/v3/kv/range", json{{"key", base64_encode(prefix)}, {"range_end", base64_encode(prefix_end(prefix))}}.dump()));
    if (revision != nullptr) *revision = i64(r.value("header", json::object()), "revision");
    return entries_of(r);
}

PrefixSummary EtcdStore::summarize(const std::string& prefix) {
    // The newest key by mod revision, keys only; etcd's count is the whole range's despite the limit.
    const json r = json::parse(call("/v3/kv/range", json{{"key", base64_encode(prefix)},
                                                         {"range_end", base64_encode(prefix_end(prefix))},
                                                         {"limit", 1},
                                                         {"keys_only", true},
                                                         {"sort_order", "DESCEND"},
                                                         {"sort_target", "MOD"}}
                                                        .dump()));
    PrefixSummary s;
    s.count = i64(r, "count");
    const auto kvs = r.find("kvs");
    if (kvs != r.end() && kvs->is_array() && !kvs->empty()) s.max_mod_revision = i64((*kvs)[0], "mod_revision");
    return s;
}

void EtcdStore::put(const std::vector<std::pair<std::string, std::string>>& kvs, int64_t lease) {
    if (kvs.empty()) return;
    json ops = json::array();
    for (const auto& [k, v] : kvs) ops.push_back(put_op(k, v, lease));
    call("/v3/kv/txn", json{{"success", ops}}.dump());
}

void EtcdStore::erase(const std::vector<std::string>& keys) {
    if (keys.empty()) return;
    json ops = json::array();
    for (const auto& k : keys) ops.push_back({{"request_delete_range", {{"key", base64_encode(k)}}}});
    call("/v3/kv/txn", json{{"success", ops}}.dump());
}

int64_t EtcdStore::put_if(const std::string& key, const std::string& value, int64_t lease, int64_t expect_mod,
                          std::optional<KvEntry>* current) {
    const json cmp = expect_mod == 0
                         ? json{{"key", base64_encode(key)}, {"result", "EQUAL"}, {"target", "CREATE"}, {"create_revision", "0"}}
                         : json{{"key", base64_encode(key)}, {"result", "EQUAL"}, {"target", "MOD"},
                                {"mod_revision", std::to_string(expect_mod)}};
    const json body{{"compare", json::array({cmp})},
                    {"success", json::array({put_op(key, value, lease)})},
                    {"failure", json::array({{{"request_range", {{"key", base64_encode(key)}}}}})}};
    const json r = json::parse(call("/v3/kv/txn", body.dump()));
    if (r.value("succeeded", false)) return i64(r.value("header", json::object()), "revision");
    if (current != nullptr) {
        *current = std::nullopt;
        const json& resp = r.value("responses", json::array());
        if (!resp.empty()) {
            const auto e = entries_of(resp.front().value("response_range", json::object()));
            if (!e.empty()) *current = e.front();
        }
    }
    return 0;
}

bool EtcdStore::erase_if(const std::string& key, const std::string& value) {
    const json body{
        {"compare", json::array({{{"key", base64_encode(key)}, {"result", "EQUAL"}, {"target", "VALUE"},
                                  {"value", base64_encode(value)}}})},
        {"success", json::array({{{"request_delete_range", {{"key", base64_encode(key)}}}}})}};
    return json::parse(call("/v3/kv/txn", body.dump())).value("succeeded", false);
}

std::vector<EndpointHealth> EtcdStore::health() {
    std::lock_guard lk(mu_);
    std::vector<EndpointHealth> out;
    for (const auto& url : endpoints_) {
        const Reply r = post_one(url, "/health", "", std::min<long>(timeout_ms_, 500));
        std::string state = "down";
        if (r.status == 200) {
            const json j = json::parse(r.body, nullptr, false);
            state = j.is_object() && j.value("health", "") == "true" ? "up" : "no quorum";
        } else if (r.status != 0) {
            state = "no quorum";
        }
        out.push_back({url, state});
    }
    return out;
}

// ---------------------------------------------------------------------------------------------
// In memory

void MemStore::enter() {
    if (!available_) throw StoreUnavailable("cluster store unavailable (memory store switched off)", true);
    const uint64_t now = now_ms_();
    std::vector<int64_t> expired;
    for (const auto& [id, l] : leases_)
        if (l.deadline_ms <= now) expired.push_back(id);
    for (const int64_t id : expired) revoke_locked(id);
}

void MemStore::revoke_locked(int64_t lease) {
    if (leases_.erase(lease) == 0) return;
    bool changed = false;
    for (auto it = kv_.begin(); it != kv_.end();) {
        if (it->second.lease == lease) {
            it = kv_.erase(it);
            changed = true;
        } else {
            ++it;
        }
    }
    if (changed) ++revision_;
}

int64_t MemStore::grant(int64_t ttl_s) {
    std::lock_guard lk(mu_);
    enter();
    const int64_t id = ++next_lease_;
    leases_[id] = {ttl_s, now_ms_() + static_cast<uint64_t>(ttl_s) * 1000};
    return id;
}

int64_t MemStore::keepalive(int64_t lease) {
    std::lock_guard lk(mu_);
    enter();
    const auto it = leases_.find(lease);
    if (it == leases_.end()) return 0;
    it->second.deadline_ms = now_ms_() + static_cast<uint64_t>(it->second.ttl_s) * 1000;
    return it->second.ttl_s;
}

void MemStore::revoke(int64_t lease) {
    std::lock_guard lk(mu_);
    enter();
    revoke_locked(lease);
}

std::optional<KvEntry> MemStore::get(const std::string& key) {
    std::lock_guard lk(mu_);
    enter();
    const auto it = kv_.find(key);
    if (it == kv_.end()) return std::nullopt;
    return it->second;
}

std::vector<KvEntry> MemStore::range(const std::string& prefix, int64_t* revision) {
    std::lock_guard lk(mu_);
    enter();
    std::vector<KvEntry> out;
    for (auto it = kv_.lower_bound(prefix); it != kv_.end() && it->first.starts_with(prefix); ++it) out.push_back(it->second);
    if (revision != nullptr) *revision = revision_;
    return out;
}

PrefixSummary MemStore::summarize(const std::string& prefix) {
    std::lock_guard lk(mu_);
    enter();
    PrefixSummary s;
    for (auto it = kv_.lower_bound(prefix); it != kv_.end() && it->first.starts_with(prefix); ++it) {
        ++s.count;
        s.max_mod_revision = std::max(s.max_mod_revision, it->second.mod_revision);
    }
    return s;
}

void MemStore::put_locked(const std::string& key, const std::string& value, int64_t lease) {
    KvEntry& e = kv_[key];
    if (e.create_revision == 0) e.create_revision = revision_;
    e.key = key;
    e.value = value;
    e.mod_revision = revision_;
    e.lease = lease;
}

void MemStore::put(const std::vector<std::pair<std::string, std::string>>& kvs, int64_t lease) {
    std::lock_guard lk(mu_);
    enter();
    if (lease != 0 && !leases_.contains(lease)) throw StoreRefused("requested lease not found");
    ++revision_;
    for (const auto& [k, v] : kvs) put_locked(k, v, lease);
}

void MemStore::erase(const std::vector<std::string>& keys) {
    std::lock_guard lk(mu_);
    enter();
    ++revision_;
    for (const auto& k : keys) kv_.erase(k);
}

int64_t MemStore::put_if(const std::string& key, const std::string& value, int64_t lease, int64_t expect_mod,
                         std::optional<KvEntry>* current) {
    std::lock_guard lk(mu_);
    enter();
    const auto it = kv_.find(key);
    const int64_t have = it == kv_.end() ? 0 : it->second.mod_revision;
    if (have != expect_mod) {
        if (current != nullptr) *current = it == kv_.end() ? std::nullopt : std::optional<KvEntry>(it->second);
        return 0;
    }
    if (lease != 0 && !leases_.contains(lease)) throw StoreRefused("requested lease not found");
    ++revision_;
    put_locked(key, value, lease);
    return revision_;
}

bool MemStore::erase_if(const std::string& key, const std::string& value) {
    std::lock_guard lk(mu_);
    enter();
    const auto it = kv_.find(key);
    if (it == kv_.end() || it->second.value != value) return false;
    ++revision_;
    kv_.erase(it);
    return true;
}

std::vector<EndpointHealth> MemStore::health() {
    std::lock_guard lk(mu_);
    return {{"memory", available_ ? "up" : "no quorum"}};
}

}  // namespace fedgate
