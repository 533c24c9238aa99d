/*
 * server/server.h - `pagellm serve`, the OpenAI-compatible HTTP server (docs/server.md), as the
 * pagellm program (tools/) calls it. Like every command: returns the exit status (0 success,
 * including a clean stop on SIGTERM/SIGINT; 1 runtime failure; 2 usage error).
 */
#ifndef PL_SERVER_SERVER_H
#define PL_SERVER_SERVER_H

int pl_serve_main(int argc, char **argv);

#endif
