/*
 * server/log.h - the server's log lines and its clock, below every other file of server/.
 */
#ifndef PL_SERVER_LOG_H
#define PL_SERVER_LOG_H

/* Log lines on stderr: "INFO 12:34:56.789 text". */
void pl_srv_log(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
double pl_srv_now(void); /* monotonic seconds */

#endif
