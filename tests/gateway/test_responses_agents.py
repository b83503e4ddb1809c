"""The OpenAI Agents SDK with its defaults (the Responses API) runs an agent with a tool through the gateway."""
import openai
import pytest

from keys.ledger import mismatches
from models_catalog.models import UsageEvent

agents = pytest.importorskip("agents")


def test_an_agent_calls_its_function_tool_and_answers_from_the_result(live_server, seeded, local_key):
    _, secret = local_key
    seen = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        seen.append(city)
        return f"Sunny in {city}, 21 degrees"

    client = openai.AsyncOpenAI(base_url=f"{live_server.url}/v1", api_key=secret, max_retries=0, timeout=30)
    agents.set_default_openai_client(client, use_for_tracing=False)
    agents.set_tracing_disabled(True)
    agent = agents.Agent(name="Weather", instructions="Answer about the weather.", model="local-chat",
                         tools=[get_weather])
    result = agents.Runner.run_sync(agent, "use get_weather: Paris")
    assert seen == ["Paris"]
    assert "Sunny in Paris, 21 degrees" in result.final_output
    assert list(UsageEvent.objects.values_list("operation", flat=True)) == ["responses", "responses"]
    assert mismatches() == []
