/*
 * engine/chat_messages.h - a chat's messages as OpenAI's clients send them, turned into what
 * chat templates expect (engine/chat_messages.c).
 */
#ifndef PL_ENGINE_CHAT_MESSAGES_H
#define PL_ENGINE_CHAT_MESSAGES_H

#include <stddef.h>

#include "pagellm.h"

/* Reads messages_json (a JSON array of message objects, each with a string "role") and
 * writes the same messages as chat templates expect them, the way vLLM hands OpenAI's
 * messages to Hugging Face templates:
 *   - "content" null or missing becomes "" (an assistant turn that only calls tools; the
 *     templates do `'</think>' in message.content` or `message.content | trim`);
 *   - "content" given as a list of parts becomes their texts joined by "\n" (only parts
 *     {"type": "text", "text": ...}; another kind of part is refused, naming it);
 *   - "tool_calls": null or [] is dropped; each call's function.arguments given as JSON text
 *     becomes the value it encodes (templates write it with `| tojson`), kept as text when it
 *     does not parse; arguments null, missing or "" become {};
 *   - everything else (tool_call_id, name, reasoning_content, ...) is kept as given.
 * *out_json: pl_malloc'd, NUL-terminated (pl_free). Numbers are read as JavaScript reads them
 * (doubles). Errors: PL_ERR_INVALID_ARGUMENT (not JSON, not a list, a message that is not an
 * object or has no string role, a bad content part: "messages[2].content[1]: ..."),
 * PL_ERR_OUT_OF_MEMORY. */
pl_status pl_chat_messages_prepare(const char *messages_json, char **out_json);

#endif
