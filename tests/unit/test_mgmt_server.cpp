// The management socket: the one-line JSON protocol, errors as replies, and the socket file's life.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "controlplane/mgmt_server.hpp"
#include "tools/mgmt_client.hpp"

namespace fedgate {
namespace {

using json = nlohmann::ordered_json;

json echo_handler(const json& req) {
    if (req["cmd"] == "boom") throw MgmtError("boom: field 'x' is bad");
    return {{"you_said", req["cmd"]}};
}

json reply(const std::string& line) { return json::parse(MgmtServer::reply_for(line, echo_handler)); }

TEST(MgmtProtocol, GoodRequestGetsOkAndTheResult) {
    EXPECT_EQ(reply(R"({"cmd":"status"})"), json::parse(R"({"ok":true,"result":{"you_said":"status"}})"));
}

TEST(MgmtProtocol, ReplyIsOneLine) {
    const std::string r = MgmtServer::reply_for(R"({"cmd":"status"})", echo_handler);
    EXPECT_EQ(r.find('\n'), r.size() - 1);
}

TEST(MgmtProtocol, BadRequestsGetAnErrorNotACrash) {
    EXPECT_EQ(reply("not json")["ok"], false);
    EXPECT_NE(reply("not json")["error"].get<std::string>().find("request is not JSON"), std::string::npos);
    EXPECT_EQ(reply("[1,2]")["error"], "request must be a JSON object with a string \"cmd\"");
    EXPECT_EQ(reply(R"({"cmd":7})")["error"], "request must be a JSON object with a string \"cmd\"");
    EXPECT_EQ(reply(R"({"cmd":"boom"})"), json::parse(R"({"ok":false,"error":"boom: field 'x' is bad"})"));
}

class MgmtSocket : public ::testing::Test {
protected:
    void SetUp() override {
        dir_ = std::filesystem::temp_directory_path() / ("fgmgmt" + std::to_string(::getpid()));
        std::filesystem::create_directories(dir_);
        path_ = (dir_ / "t.sock").string();
    }
    void TearDown() override { std::filesystem::remove_all(dir_); }

    static std::string call(const std::string& path, const std::string& line) {
        const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        std::strcpy(a.sun_path, path.c_str());
        if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
            ::close(fd);
            return "connect failed";
        }
        ::send(fd, line.data(), line.size(), 0);
        std::string out;
        char buf[4096];
        for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) out.append(buf, static_cast<std::size_t>(n));
        ::close(fd);
        return out;
    }

    std::filesystem::path dir_;
    std::string path_;
    tbb::task_arena arena_{2, 0};
};

TEST_F(MgmtSocket, AnswersOverTheSocketAndRemovesItOnStop) {
    MgmtServer s(path_, echo_handler, arena_);
    s.start();
    EXPECT_EQ(call(path_, "{\"cmd\":\"stats\"}\n"), "{\"ok\":true,\"result\":{\"you_said\":\"stats\"}}\n");
    s.stop();
    EXPECT_FALSE(std::filesystem::exists(path_));
}

TEST_F(MgmtSocket, ASecondServerOnALiveSocketIsRefused) {
    MgmtServer s(path_, echo_handler, arena_);
    s.start();
    try {
        MgmtServer second(path_, echo_handler, arena_);
        FAIL() << "a second server took a live socket";
    } catch (const MgmtError& e) {
        EXPECT_NE(std::string(e.what()).find("is in use"), std::string::npos) << e.what();
    }
    EXPECT_EQ(call(path_, "{\"cmd\":\"a\"}\n"), "{\"ok\":true,\"result\":{\"you_said\":\"a\"}}\n")
        << "the first server must keep working";
}

TEST_F(MgmtSocket, AStaleSocketFromADeadDaemonIsReplaced) {
    {
        const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        std::strcpy(a.sun_path, path_.c_str());
        ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
        ::close(fd);  // the file stays, nobody listens
    }
    MgmtServer s(path_, echo_handler, arena_);
    s.start();
    EXPECT_EQ(call(path_, "{\"cmd\":\"b\"}\n"), "{\"ok\":true,\"result\":{\"you_said\":\"b\"}}\n");
}

TEST_F(MgmtSocket, ARegularFileInTheWayIsNotDeleted) {
    std::ofstream(path_) << "precious";
    EXPECT_THROW(MgmtServer(path_, echo_handler, arena_), MgmtError);
    std::ifstream in(path_);
    std::string content;
    in >> content;
    EXPECT_EQ(content, "precious");
}

// fedgatectl capture -w - passes its standard output this way: the handler takes the descriptor and
// writes into the client's pipe; a descriptor no handler takes is closed, so the reader sees the end.
TEST_F(MgmtSocket, ADescriptorPassedWithARequestReachesItsHandler) {
    MgmtServer s(path_, [](const json& req) -> json {
        if (req["cmd"] != "write") return {{"took", false}};
        const int fd = mgmt_take_passed_fd();
        if (fd < 0) throw MgmtError("no descriptor came");
        const bool ok = ::write(fd, "pcapng", 6) == 6;
        ::close(fd);
        return {{"took", ok}, {"again", mgmt_take_passed_fd()}};
    }, arena_);
    s.start();
    int pipe_fds[2];
    ASSERT_EQ(::pipe(pipe_fds), 0);
    const MgmtReply r = mgmt_call(path_, {{"cmd", "write"}}, std::chrono::seconds(5), pipe_fds[1]);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.result, json({{"took", true}, {"again", -1}}));
    char buf[16] = {};
    EXPECT_EQ(::read(pipe_fds[0], buf, sizeof buf), 6);
    EXPECT_EQ(std::string(buf), "pcapng");

    // Not taken: fedgated closes its copy, so once the client closes its own the reader gets EOF.
    const MgmtReply ignored = mgmt_call(path_, {{"cmd", "other"}}, std::chrono::seconds(5), pipe_fds[1]);
    EXPECT_EQ(ignored.result, json({{"took", false}}));
    ::close(pipe_fds[1]);
    EXPECT_EQ(::read(pipe_fds[0], buf, sizeof buf), 0) << "a copy of the write end is still open somewhere";
    ::close(pipe_fds[0]);

    const MgmtReply none = mgmt_call(path_, {{"cmd", "write"}}, std::chrono::seconds(5));
    EXPECT_FALSE(none.ok);
    EXPECT_EQ(none.error, "no descriptor came");
}

}  // namespace
}  // namespace fedgate
