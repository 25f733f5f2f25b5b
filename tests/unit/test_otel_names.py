"""hooks-otel's one table of names agrees with the semantic-conventions package."""

from __future__ import annotations

import subprocess
import sys
import warnings

from amplifier_anyio.hooks.otel import ATTRIBUTES, METRICS, OPERATIONS

with warnings.catch_warnings():  # the GenAI names are marked as moving to their own repo
    warnings.simplefilter("ignore", DeprecationWarning)
    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
    from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
    from opentelemetry.semconv.attributes import error_attributes, server_attributes


def test_every_attribute_the_package_names_is_spelled_as_the_package_spells_it() -> None:
    expected = {
        "operation": gen_ai.GEN_AI_OPERATION_NAME,
        "provider": gen_ai.GEN_AI_PROVIDER_NAME,
        "agent_name": gen_ai.GEN_AI_AGENT_NAME,
        "conversation_id": gen_ai.GEN_AI_CONVERSATION_ID,
        "request_model": gen_ai.GEN_AI_REQUEST_MODEL,
        "request_stream": gen_ai.GEN_AI_REQUEST_STREAM,
        "response_model": gen_ai.GEN_AI_RESPONSE_MODEL,
        "response_id": gen_ai.GEN_AI_RESPONSE_ID,
        "finish_reasons": gen_ai.GEN_AI_RESPONSE_FINISH_REASONS,
        "input_tokens": gen_ai.GEN_AI_USAGE_INPUT_TOKENS,
        "output_tokens": gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS,
        "cache_read_tokens": gen_ai.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
        "cache_creation_tokens": gen_ai.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
        "reasoning_tokens": gen_ai.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
        "token_type": gen_ai.GEN_AI_TOKEN_TYPE,
        "tool_name": gen_ai.GEN_AI_TOOL_NAME,
        "tool_call_id": gen_ai.GEN_AI_TOOL_CALL_ID,
        "tool_type": gen_ai.GEN_AI_TOOL_TYPE,
        "tool_description": gen_ai.GEN_AI_TOOL_DESCRIPTION,
        "input_messages": gen_ai.GEN_AI_INPUT_MESSAGES,
        "output_messages": gen_ai.GEN_AI_OUTPUT_MESSAGES,
        "system_instructions": gen_ai.GEN_AI_SYSTEM_INSTRUCTIONS,
        "tool_definitions": gen_ai.GEN_AI_TOOL_DEFINITIONS,
        "tool_arguments": gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS,
        "tool_result": gen_ai.GEN_AI_TOOL_CALL_RESULT,
        "error_type": error_attributes.ERROR_TYPE,
        "server_address": server_attributes.SERVER_ADDRESS,
        "server_port": server_attributes.SERVER_PORT,
    }
    assert {k: ATTRIBUTES[k] for k in expected} == expected
    ours = {k: v for k, v in ATTRIBUTES.items() if k not in expected}
    assert all(v.startswith("amplifier.") for v in ours.values()), ours


def test_the_metric_names_and_enumerated_values_match() -> None:
    assert METRICS["operation_duration"] == gen_ai_metrics.GEN_AI_CLIENT_OPERATION_DURATION
    assert METRICS["token_usage"] == gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE
    assert (
        METRICS["time_to_first_chunk"] == gen_ai_metrics.GEN_AI_CLIENT_OPERATION_TIME_TO_FIRST_CHUNK
    )
    # Not in the package yet: the conventions' spelling, kept here.
    assert METRICS["tool_duration"] == "gen_ai.execute_tool.duration"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert OPERATIONS["chat"] == gen_ai.GenAiOperationNameValues.CHAT.value
        assert OPERATIONS["turn"] == gen_ai.GenAiOperationNameValues.INVOKE_AGENT.value
        assert OPERATIONS["tool"] == gen_ai.GenAiOperationNameValues.EXECUTE_TOOL.value
        assert OPERATIONS["input"] == gen_ai.GenAiTokenTypeValues.INPUT.value
        assert OPERATIONS["output"] == gen_ai.GenAiTokenTypeValues.OUTPUT.value
        assert gen_ai.GenAiProviderNameValues.OPENAI.value == "openai"  # as providers report it
    # gen_ai.tool.type has no enum in the package; the conventions list "function".
    assert OPERATIONS["function"] == "function"


def test_without_the_extra_the_import_error_says_what_to_install() -> None:
    code = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "try:\n"
        "    import amplifier_anyio.hooks.otel\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc.name, '|', exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == (
        "opentelemetry | hooks-otel needs opentelemetry-api: pip install 'amplifier-anyio[otel]'"
    )
