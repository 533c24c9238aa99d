/*
 * reply/reply_internal.h - what the files of reply/ share.
 */
#ifndef PL_REPLY_INTERNAL_H
#define PL_REPLY_INTERNAL_H

#include <stdbool.h>

/* Whether the prompt leaves the reasoning open: its last "<think>" has no "</think>" after
 * it (a template that opens the reasoning, as Qwen3 thinking models' do). NULL: false. */
bool pl_reply_prompt_opens(const char *prompt);

/* The index of name in the tool-call syntaxes ("hermes", "llama3_json", "mistral") or the
 * reasoning syntaxes ("qwen3", "deepseek_r1"); else -1 with PL_ERR_NOT_FOUND set, listing
 * the known names. */
int pl_reply_tool_syntax(const char *name);
int pl_reply_reasoning_syntax(const char *name);

#endif
