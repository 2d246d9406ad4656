"""The OpenAI Responses API (/v1/responses): its request, its translation to and from chat completions."""
