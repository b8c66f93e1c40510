// The group-commit queue both Redis backends batch through (limiters/redis/group_commit.hpp).
#include <doctest/doctest.h>

#include <vector>

#include "limiters/redis/group_commit.hpp"

using rategate::limiters::redis::group_commit;

TEST_CASE("group commit: one call in flight per lane; what waits goes next, up to max_batch") {
    group_commit<int> q(3);
    for (int i = 0; i < 5; ++i)
        q.push(i);
    CHECK(q.take() == std::vector<int>{0, 1, 2});
    CHECK(q.in_flight() == 1);
    CHECK(q.take().empty());  // the lane is busy: 3 and 4 wait
    q.push(5);
    CHECK(q.waiting() == 3);
    q.done();
    CHECK(q.take() == std::vector<int>{3, 4, 5});
    q.done();
    CHECK(q.take().empty());  // nothing waits
    CHECK(q.in_flight() == 0);
    q.done();  // a spare done() never frees a lane that is not taken
    CHECK(q.in_flight() == 0);
}

TEST_CASE("group commit: several lanes, and taking everything back to route it again") {
    group_commit<int> q(2, 2);
    for (int i = 0; i < 7; ++i)
        q.push(i);
    CHECK(q.take() == std::vector<int>{0, 1});
    CHECK(q.take() == std::vector<int>{2, 3});
    CHECK(q.take().empty());
    CHECK(q.take_all() == std::vector<int>{4, 5, 6});
    CHECK(q.empty());
    CHECK(q.in_flight() == 2);
}
