/*
 * tests/server/test_server_units.c - the server's parts that need no socket: request bodies
 * into sampling parameters, prompts and chat options (every mapping, every refusal naming its
 * field), /tokenize and /detokenize bodies, and the id registry against a plain array under
 * random operations.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv.h"
#include "test_support.h"

static const pl_srv_limits LIM = {.max_n = 8, .max_choices = 32};

static pl_srv_request parse_ok(pl_srv_kind kind, const char *body) {
    pl_srv_request r;
    pl_srv_error err;
    cr_assert(pl_srv_request_parse(kind, body, strlen(body), &LIM, &r, &err), "%s: %d %s", body,
              err.status, err.message);
    return r;
}

static pl_srv_error parse_bad(pl_srv_kind kind, const char *body, int status, const char *param) {
    pl_srv_request r;
    pl_srv_error err;
    cr_assert(!pl_srv_request_parse(kind, body, strlen(body), &LIM, &r, &err), "%s parsed", body);
    cr_assert_eq(err.status, status, "%s: status %d (%s)", body, err.status, err.message);
    cr_assert_str_eq(err.param, param, "%s: param '%s' (%s)", body, err.param, err.message);
    return err;
}

Test(server_request, completion_fields_reach_the_sampling_params) {
    pl_srv_request r = parse_ok(PL_SRV_COMPLETION,
        "{\"model\": \"m\", \"prompt\": \"hi\", \"max_tokens\": 7, \"temperature\": 0.5, "
        "\"top_p\": 0.9, \"top_k\": 40, \"min_p\": 0.1, \"n\": 2, \"stop\": [\"a\", \"bc\"], "
        "\"seed\": 11, \"presence_penalty\": 0.5, \"frequency_penalty\": -0.5, "
        "\"repetition_penalty\": 1.1, \"min_tokens\": 2, \"ignore_eos\": true, \"priority\": -3, "
        "\"logprobs\": 4, \"echo\": true, \"stream\": true, \"stop_token_ids\": [5, 6], "
        "\"stream_options\": {\"include_usage\": true}, \"user\": \"ignored\", \"top_a\": 1}");
    cr_assert_str_eq(r.model, "m");
    cr_assert_eq(r.n_prompts, 1);
    cr_assert_str_eq(r.prompts[0].text, "hi");
    cr_assert(r.has_max_tokens && r.sp.max_tokens == 7);
    cr_assert_float_eq(r.sp.temperature, 0.5f, 1e-7);
    cr_assert_float_eq(r.sp.top_p, 0.9f, 1e-7);
    cr_assert_eq(r.sp.top_k, 40);
    cr_assert_float_eq(r.sp.min_p, 0.1f, 1e-7);
    cr_assert_eq(r.sp.n, 2);
    cr_assert_eq(r.sp.n_stop, 2);
    cr_assert_str_eq(r.sp.stop[1], "bc");
    cr_assert(r.sp.has_seed && r.sp.seed == 11);
    cr_assert_float_eq(r.sp.presence_penalty, 0.5f, 1e-7);
    cr_assert_float_eq(r.sp.frequency_penalty, -0.5f, 1e-7);
    cr_assert_float_eq(r.sp.repetition_penalty, 1.1f, 1e-6);
    cr_assert_eq(r.sp.min_tokens, 2);
    cr_assert(r.sp.ignore_eos);
    cr_assert_eq(r.sp.priority, -3);
    cr_assert_eq(r.sp.logprobs, 4);
    cr_assert(r.echo && r.stream && r.include_usage && r.add_special_tokens);
    cr_assert_eq(r.sp.n_stop_ids, 2);
    cr_assert_eq(r.sp.stop_ids[1], 6);
    pl_srv_request_free(&r);

    r = parse_ok(PL_SRV_COMPLETION, "{\"prompt\": \"x\", \"stop\": \"end\", \"seed\": null, "
                                    "\"max_tokens\": null, \"logprobs\": null}");
    cr_assert_eq(r.sp.n_stop, 1);
    cr_assert_str_eq(r.sp.stop[0], "end");
    cr_assert(!r.sp.has_seed && !r.has_max_tokens && r.sp.logprobs == -1);
    cr_assert(!r.stream && !r.echo && !r.include_usage);
    pl_srv_request_free(&r);
}

Test(server_request, prompts_come_as_text_ids_or_batches) {
    pl_srv_request r = parse_ok(PL_SRV_COMPLETION, "{\"prompt\": [1, 2, 3]}");
    cr_assert(r.n_prompts == 1 && !r.prompts[0].text && r.prompts[0].n_ids == 3);
    cr_assert_eq(r.prompts[0].ids[2], 3);
    pl_srv_request_free(&r);
    r = parse_ok(PL_SRV_COMPLETION, "{\"prompt\": [\"a\", \"b\", \"c\"]}");
    cr_assert(r.n_prompts == 3 && !strcmp(r.prompts[2].text, "c"));
    pl_srv_request_free(&r);
    r = parse_ok(PL_SRV_COMPLETION, "{\"prompt\": [[1], [2, 3]], \"n\": 4}");
    cr_assert(r.n_prompts == 2 && r.prompts[1].n_ids == 2 && r.sp.n == 4);
    pl_srv_request_free(&r);

    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": [\"a\", [1]]}", 400, "prompt");
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": [[1], \"a\"]}", 400, "prompt");
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": [1, -2]}", 400, "prompt");
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": [1, 2147483648]}", 400, "prompt");
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": [[]]}", 400, "prompt[0]");
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": []}", 400, "prompt");
    /* "" is BOS alone (the handler refuses it only when no token is left) */
    r = parse_ok(PL_SRV_COMPLETION, "{\"prompt\": \"\"}");
    cr_assert_str_eq(r.prompts[0].text, "");
    pl_srv_request_free(&r);
    /* an empty stop string stops nothing: dropped */
    r = parse_ok(PL_SRV_COMPLETION, "{\"prompt\": \"x\", \"stop\": [\"\", \"end\", \"\"]}");
    cr_assert_eq(r.sp.n_stop, 1);
    cr_assert_str_eq(r.sp.stop[0], "end");
    pl_srv_request_free(&r);
    r = parse_ok(PL_SRV_COMPLETION, "{\"prompt\": \"x\", \"stop\": \"\", \"max_tokens\": 3.0}");
    cr_assert_eq(r.sp.n_stop, 0);
    cr_assert_eq(r.sp.max_tokens, 3);
    pl_srv_request_free(&r);
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": \"x\", \"max_tokens\": 3.5}", 400, "max_tokens");
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": {}}", 400, "prompt");
    parse_bad(PL_SRV_COMPLETION, "{}", 400, "prompt");
    /* 9 prompts x n 4 = 36 choices > 32 */
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": [\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\",\"a\"], "
                                 "\"n\": 4}", 400, "n");
}

Test(server_request, vllms_extra_sampling_fields_reach_the_params) {
    pl_srv_request r = parse_ok(PL_SRV_COMPLETION,
        "{\"prompt\": \"hi\", \"logit_bias\": {\"5\": -100, \"7\": 2.5}, "
        "\"skip_special_tokens\": false, \"include_stop_str_in_output\": true}");
    cr_assert_eq(r.sp.n_logit_bias, 2);
    cr_assert(!r.sp.skip_special_tokens && r.sp.include_stop_str_in_output);
    pl_srv_request_free(&r);
}

Test(server_request, refusals_name_the_field_with_the_library_message) {
    pl_srv_error e = parse_bad(PL_SRV_COMPLETION, "{\"prompt\": \"a\", \"top_p\": 0}", 400, "top_p");
    cr_assert(strstr(e.message, "(0, 1]"), "%s", e.message);
    /* the request's own names, never the library's */
    cr_assert_str_eq(e.message, "top_p = 0: must be in (0, 1]");
    e = parse_bad(PL_SRV_COMPLETION, "{\"prompt\": \"a\", \"stop_token_ids\": [-1]}", 400,
                  "stop_token_ids");
    cr_assert(!strncmp(e.message, "stop_token_ids[0]: must be a token id", 37), "%s", e.message);
    cr_assert(!strstr(e.message, "sampling.") && !strstr(e.message, "stop_ids"), "%s", e.message);
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": \"a\", \"temperature\": \"hot\"}", 400, "temperature");
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": \"a\", \"n\": 9}", 400, "n");
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": \"a\", \"n\": 65}", 400, "n");
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": \"a\", \"max_tokens\": 0}", 400, "max_tokens");
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": \"a\", \"stream\": 1}", 400, "stream");
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": \"a\", \"echo\": \"yes\"}", 400, "echo");
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": \"a\", \"seed\": -1}", 400, "seed");
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": \"a\", \"stop\": [1]}", 400, "stop");
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": \"a\", \"logprobs\": 21}", 400, "logprobs");
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": \"a\", \"model\": 3}", 400, "model");
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": \"a\", \"suffix\": \"x\"}", 400, "suffix");
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": \"a\", \"best_of\": 2}", 400, "best_of");
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": \"a\", \"logit_bias\": {\"1\": 200}}", 400,
              "logit_bias");
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": \"a\", \"logit_bias\": [1]}", 400, "logit_bias");
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": \"a\", \"stream_options\": {}}", 400, "stream_options");
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": \"a\", \"stream\": true, \"stream_options\": "
                                 "{\"include_usage\": 1}}", 400, "stream_options.include_usage");
    e = parse_bad(PL_SRV_COMPLETION, "{\"prompt\": \"a\", \"min_tokens\": 5, \"max_tokens\": 2}", 400,
                  "min_tokens");
    e = parse_bad(PL_SRV_COMPLETION, "{\"prompt\": ", 400, "");
    cr_assert(strstr(e.message, "not valid JSON") && strstr(e.message, "line 1"), "%s", e.message);
    parse_bad(PL_SRV_COMPLETION, "[]", 400, "");
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": \"a\", \"prompt\": \"b\"}", 400, "");
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": \"a\\u0000\"}", 400, "");
    e = parse_bad(PL_SRV_COMPLETION, "", 400, "");
    json_t *j = pl_srv_error_json(&e);
    json_t *o = json_object_get(j, "error");
    cr_assert(json_is_string(json_object_get(o, "message")) &&
              json_is_string(json_object_get(o, "type")) && json_is_null(json_object_get(o, "param")) &&
              json_is_null(json_object_get(o, "code")));
    json_decref(j);
}

Test(server_request, chat_fields_map_to_openai_names) {
    pl_srv_request r = parse_ok(PL_SRV_CHAT,
        "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 3, "
        "\"max_completion_tokens\": 9, \"logprobs\": true, \"top_logprobs\": 5, "
        "\"tools\": [{\"type\": \"function\"}], \"tool_choice\": \"auto\", "
        "\"chat_template_kwargs\": {\"enable_thinking\": false}, \"add_generation_prompt\": false, "
        "\"response_format\": {\"type\": \"text\"}}");
    cr_assert(r.has_max_tokens && r.sp.max_tokens == 9, "max_completion_tokens wins");
    cr_assert(r.chat_logprobs && r.sp.logprobs == 5);
    cr_assert_str_eq(r.chat.tools, "[{\"type\":\"function\"}]");
    cr_assert_str_eq(r.chat.chat_template_kwargs, "{\"enable_thinking\":false}");
    cr_assert(!r.chat.add_generation_prompt);
    cr_assert_eq(r.n_prompts, 1, "the rendered chat is the one prompt");
    cr_assert_str_eq(r.messages_json, "[{\"role\":\"user\",\"content\":\"hi\"}]");
    pl_srv_request_free(&r);

    r = parse_ok(PL_SRV_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": "
                              "\"text\", \"text\": \"a\"}, {\"type\": \"text\", \"text\": \"b\"}]}], "
                              "\"logprobs\": true, \"tools\": [{}], \"tool_choice\": \"none\"}");
    /* kept as given: the library joins the parts when it renders */
    cr_assert(strstr(r.messages_json, "\"content\":[{\"type\":\"text\""), "%s", r.messages_json);
    cr_assert_eq(r.sp.logprobs, 0, "logprobs alone: the token's own");
    cr_assert_null(r.chat.tools, "tool_choice none: no tools for the template");
    pl_srv_request_free(&r);
    r = parse_ok(PL_SRV_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": null}]}");
    cr_assert_eq(r.sp.logprobs, -1);
    pl_srv_request_free(&r);

    parse_bad(PL_SRV_CHAT, "{}", 400, "messages");
    parse_bad(PL_SRV_CHAT, "{\"messages\": {}}", 400, "messages");
    parse_bad(PL_SRV_CHAT, "{\"messages\": [1]}", 400, "messages");
    parse_bad(PL_SRV_CHAT, "{\"messages\": [{\"role\": 1}]}", 400, "messages");
    parse_bad(PL_SRV_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", 400,
              "messages[0].content");
    parse_bad(PL_SRV_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": "
                           "\"image_url\"}]}]}", 400, "messages[0].content");
    parse_bad(PL_SRV_CHAT, "{\"messages\": [{\"role\": \"u\"}], \"top_logprobs\": 2}", 400,
              "top_logprobs");
    parse_bad(PL_SRV_CHAT, "{\"messages\": [{\"role\": \"u\"}], \"logprobs\": 1}", 400, "logprobs");
    parse_bad(PL_SRV_CHAT, "{\"messages\": [{\"role\": \"u\"}], \"tool_choice\": \"required\"}", 400,
              "tool_choice");
    parse_bad(PL_SRV_CHAT, "{\"messages\": [{\"role\": \"u\"}], \"tools\": {}}", 400, "tools");
    parse_bad(PL_SRV_CHAT, "{\"messages\": [{\"role\": \"u\"}], \"chat_template_kwargs\": []}", 400,
              "chat_template_kwargs");
    parse_bad(PL_SRV_CHAT, "{\"messages\": [{\"role\": \"u\"}], \"response_format\": {\"type\": "
                           "\"xml\"}}", 400, "response_format");
    /* fields of the other endpoint are not taken */
    r = parse_ok(PL_SRV_CHAT, "{\"messages\": [{\"role\": \"u\"}], \"prompt\": 5, \"echo\": 1}");
    cr_assert(!r.echo);
    pl_srv_request_free(&r);
    PL_ASSERT_NO_LEAKS();
}

/* Constraints: OpenAI's response_format, vLLM's structured_outputs and guided_* fields, each
 * into one sampling field; two at once, or one with a forced tool call, refused naming them. */
Test(server_request, constraints_reach_the_sampling_params) {
    const char *msgs = "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], ";
    char body[1024];
#define BODY(rest) (snprintf(body, sizeof body, "%s%s", msgs, rest), body)
    pl_srv_request r = parse_ok(PL_SRV_CHAT, BODY("\"response_format\": {\"type\": \"json_schema\", "
        "\"json_schema\": {\"name\": \"n\", \"strict\": true, \"schema\": {\"type\": \"integer\"}}}}"));
    cr_assert_str_eq(r.sp.json_schema, "{\"type\":\"integer\"}");
    cr_assert_str_eq(r.constraint_param, "response_format");
    pl_srv_request_free(&r);
    r = parse_ok(PL_SRV_CHAT, BODY("\"response_format\": {\"type\": \"json_object\"}}"));
    cr_assert(strstr(r.sp.json_schema, "\"additionalProperties\":true"), "%s", r.sp.json_schema);
    pl_srv_request_free(&r);
    r = parse_ok(PL_SRV_CHAT, BODY("\"response_format\": {\"type\": \"text\"}}"));
    cr_assert(!r.sp.json_schema && !r.constraint_param);
    pl_srv_request_free(&r);
    r = parse_ok(PL_SRV_COMPLETION, "{\"prompt\": \"x\", \"structured_outputs\": {\"regex\": \"[a-z]+\"}}");
    cr_assert_str_eq(r.sp.regex, "[a-z]+");
    pl_srv_request_free(&r);
    r = parse_ok(PL_SRV_COMPLETION, "{\"prompt\": \"x\", \"structured_outputs\": {\"choice\": [\"a\", \"b\"]}}");
    cr_assert(r.sp.n_choice == 2 && !strcmp(r.sp.choice[1], "b"));
    pl_srv_request_free(&r);
    r = parse_ok(PL_SRV_COMPLETION, "{\"prompt\": \"x\", \"structured_outputs\": {\"json\": \"{\\\"type\\\": \\\"string\\\"}\"}}");
    cr_assert_str_eq(r.sp.json_schema, "{\"type\":\"string\"}", "a schema given as text");
    pl_srv_request_free(&r);
    r = parse_ok(PL_SRV_COMPLETION, "{\"prompt\": \"x\", \"structured_outputs\": {\"grammar\": \"root ::= \\\"a\\\"\"}}");
    cr_assert_str_eq(r.sp.grammar, "root ::= \"a\"");
    pl_srv_request_free(&r);
    r = parse_ok(PL_SRV_COMPLETION, "{\"prompt\": \"x\", \"guided_json\": {\"type\": \"boolean\"}}");
    cr_assert_str_eq(r.sp.json_schema, "{\"type\":\"boolean\"}");
    cr_assert_str_eq(r.constraint_param, "guided_json");
    pl_srv_request_free(&r);
    r = parse_ok(PL_SRV_COMPLETION, "{\"prompt\": \"x\", \"guided_regex\": \"\\\\d+\"}");
    cr_assert_str_eq(r.sp.regex, "\\d+");
    pl_srv_request_free(&r);
    r = parse_ok(PL_SRV_COMPLETION, "{\"prompt\": \"x\", \"guided_choice\": [\"yes\", \"no\"]}");
    cr_assert_eq(r.sp.n_choice, 2);
    pl_srv_request_free(&r);
    r = parse_ok(PL_SRV_COMPLETION, "{\"prompt\": \"x\", \"guided_grammar\": \"root ::= [0-9]\"}");
    cr_assert_str_eq(r.sp.grammar, "root ::= [0-9]");
    pl_srv_request_free(&r);

    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": \"x\", \"guided_regex\": \"a\", \"guided_choice\": [\"b\"]}",
              400, "guided_choice");
    parse_bad(PL_SRV_CHAT, BODY("\"response_format\": {\"type\": \"json_object\"}, "
              "\"structured_outputs\": {\"regex\": \"a\"}}"), 400, "structured_outputs");
    parse_bad(PL_SRV_CHAT, BODY("\"response_format\": {\"type\": \"json_schema\"}}"), 400,
              "response_format");
    parse_bad(PL_SRV_CHAT, BODY("\"response_format\": {\"type\": \"json_schema\", \"json_schema\": "
              "{\"schema\": 5}}}"), 400, "response_format");
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": \"x\", \"structured_outputs\": [1]}", 400,
              "structured_outputs");
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": \"x\", \"structured_outputs\": {\"structural_tag\": {}}}",
              400, "structured_outputs");
    parse_bad(PL_SRV_COMPLETION, "{\"prompt\": \"x\", \"guided_choice\": 5}", 400, "guided_choice");

    /* tools: the choice's forms, and what a forced call needs */
    const char *tools = "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", "
                        "\"parameters\": {\"type\": \"object\"}}}], ";
    char rest[512];
#define TOOLS(choice) (snprintf(rest, sizeof rest, "%s%s}", tools, choice), BODY(rest))
    r = parse_ok(PL_SRV_CHAT, TOOLS("\"tool_choice\": \"required\", \"parallel_tool_calls\": false"));
    cr_assert(r.tool_choice == PL_SRV_TOOLS_REQUIRED && !r.parallel_tool_calls && r.tools);
    cr_assert(r.chat.tools && strstr(r.chat.tools, "\"f\""));
    pl_srv_request_free(&r);
    r = parse_ok(PL_SRV_CHAT, TOOLS("\"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"f\"}}"));
    cr_assert(r.tool_choice == PL_SRV_TOOLS_NAMED && !strcmp(r.tool_name, "f") && r.parallel_tool_calls);
    pl_srv_request_free(&r);
    r = parse_ok(PL_SRV_CHAT, TOOLS("\"tool_choice\": \"auto\""));
    cr_assert(r.tool_choice == PL_SRV_TOOLS_AUTO && r.chat.tools);
    pl_srv_request_free(&r);
    r = parse_ok(PL_SRV_CHAT, TOOLS("\"tool_choice\": \"none\""));
    cr_assert(r.tool_choice == PL_SRV_TOOLS_NONE && !r.chat.tools && !r.tools);
    pl_srv_request_free(&r);
    parse_bad(PL_SRV_CHAT, TOOLS("\"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"g\"}}"),
              400, "tool_choice");
    parse_bad(PL_SRV_CHAT, TOOLS("\"tool_choice\": \"sometimes\""), 400, "tool_choice");
    parse_bad(PL_SRV_CHAT, TOOLS("\"tool_choice\": 5"), 400, "tool_choice");
    parse_bad(PL_SRV_CHAT, TOOLS("\"tool_choice\": \"required\", \"guided_regex\": \"a\""), 400,
              "tool_choice");
    parse_bad(PL_SRV_CHAT, BODY("\"tools\": [{\"type\": \"function\"}], \"tool_choice\": \"required\"}"),
              400, "tools");
    parse_bad(PL_SRV_CHAT, BODY("\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", "
              "\"parameters\": 3}}], \"tool_choice\": \"required\"}"), 400, "tools");
    parse_bad(PL_SRV_CHAT, BODY("\"parallel_tool_calls\": 1}"), 400, "parallel_tool_calls");
#undef TOOLS
#undef BODY
    PL_ASSERT_NO_LEAKS();
}

Test(server_request, tokenize_and_detokenize_bodies) {
    pl_srv_tokenize t;
    pl_srv_error err;
    const char *b = "{\"prompt\": \"hello\", \"return_token_strs\": true}";
    cr_assert(pl_srv_tokenize_parse(b, strlen(b), &t, &err));
    cr_assert(t.add_special_tokens && t.return_token_strs && !strcmp(t.prompt, "hello"));
    pl_srv_tokenize_free(&t);
    b = "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [], "
        "\"add_generation_prompt\": false}";
    cr_assert(pl_srv_tokenize_parse(b, strlen(b), &t, &err), "%s", err.message);
    cr_assert(!t.add_special_tokens, "a chat adds none by default (vLLM)");
    cr_assert(!t.chat.add_generation_prompt && !strcmp(t.chat.tools, "[]"));
    pl_srv_tokenize_free(&t);
    const char *bad[] = {"{}", "{\"prompt\": \"a\", \"messages\": []}", "{\"prompt\": 1}",
                         "{\"prompt\": \"a\", \"add_special_tokens\": 1}", "nope"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert(!pl_srv_tokenize_parse(bad[i], strlen(bad[i]), &t, &err), "%s", bad[i]);
        cr_assert_eq(err.status, 400);
    }
    int32_t *ids;
    size_t n;
    b = "{\"tokens\": [3, 1, 4]}";
    cr_assert(pl_srv_detokenize_parse(b, strlen(b), &ids, &n, &err));
    cr_assert(n == 3 && ids[2] == 4);
    free(ids);
    b = "{\"tokens\": []}";
    cr_assert(pl_srv_detokenize_parse(b, strlen(b), &ids, &n, &err) && n == 0);
    b = "{\"tokens\": [1.5]}";
    cr_assert(!pl_srv_detokenize_parse(b, strlen(b), &ids, &n, &err));
    cr_assert_str_eq(err.param, "tokens");
    PL_ASSERT_NO_LEAKS();
}

/* The registry against a plain list under random puts, gets and deletes; ids grow as the
 * engine's do, with every live id present and every dead one absent after each operation. */
Test(server_registry, matches_a_reference_under_random_operations) {
    pl_srv_registry g = {0};
    enum { N = 20000 };
    static pl_request_id live[N];
    size_t n_live = 0;
    pl_request_id next = 1;
    uint64_t x = 88172645463325252ull;
    for (int op = 0; op < 200000; op++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        if (n_live < N && (n_live == 0 || x % 3 != 0)) {
            cr_assert(pl_srv_registry_put(&g, next, (pl_srv_req *)(uintptr_t)(next * 8), (int)(next % 5)));
            live[n_live++] = next++;
        } else {
            size_t k = (size_t)(x >> 20) % n_live;
            pl_srv_registry_del(&g, live[k]);
            cr_assert_null(pl_srv_registry_get(&g, live[k]));
            live[k] = live[--n_live];
        }
        cr_assert_eq(g.n, n_live);
        if (op % 4096 == 0)
            for (size_t i = 0; i < n_live; i++) {
                pl_srv_entry *e = pl_srv_registry_get(&g, live[i]);
                cr_assert(e && e->id == live[i] && e->req == (pl_srv_req *)(uintptr_t)(live[i] * 8) &&
                          e->prompt == (int)(live[i] % 5), "id %llu", (unsigned long long)live[i]);
            }
    }
    cr_assert_null(pl_srv_registry_get(&g, 0));
    cr_assert_null(pl_srv_registry_get(&g, next + 5));
    pl_srv_registry_free(&g);
}
