/*
 * tests/server/test_agent.c - the line `pagellm serve --agent-port` gives HAProxy's agent
 * check (server/agent.c): its words as HAProxy reads them and the weight rule, 100 x (1 -
 * kv_usage) / (1 + waiting) percent, at least 1; "drain" while draining, "down" once the
 * engine failed. The socket side is tests/server/test_replicas.py's case agent.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "server/srv.h"

static const char *line(int waiting, double kv, bool draining, bool failed) {
    static char buf[64];
    pl_occupancy o = {.struct_size = sizeof o, .n_waiting = waiting, .kv_usage = kv};
    pl_srv_agent_line(&o, draining, failed, buf, sizeof buf);
    return buf;
}

Test(agent, weight_from_queue_and_kv) {
    cr_assert_str_eq(line(0, 0.0, false, false), "up ready 100%\n");
    cr_assert_str_eq(line(1, 0.0, false, false), "up ready 50%\n");
    cr_assert_str_eq(line(4, 0.0, false, false), "up ready 20%\n");
    cr_assert_str_eq(line(0, 0.5, false, false), "up ready 50%\n");
    cr_assert_str_eq(line(3, 0.2, false, false), "up ready 20%\n");
    cr_assert_str_eq(line(0, 0.996, false, false), "up ready 1%\n"); /* never 0: not a drain */
    cr_assert_str_eq(line(1000, 1.0, false, false), "up ready 1%\n");
    cr_assert_str_eq(line(-1, 1.5, false, false), "up ready 1%\n"); /* clamped */
}

Test(agent, drain_and_failure) {
    cr_assert_str_eq(line(0, 0.0, true, false), "drain\n");
    cr_assert_str_eq(line(0, 0.0, true, true), "down #engine failed\n");
    cr_assert_str_eq(line(5, 0.9, false, true), "down #engine failed\n");
}
