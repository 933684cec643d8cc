"""The remote tier: a model answered by an external endpoint, as if it ran here.

Two wire formats: OpenAI chat completions (``source: https://host/v1``, any OpenAI-compatible
server, a second NRT stack's gateway among them) and the Anthropic Messages API
(``source: anthropic://<model>``). Both stream or not, as the request asks, and report the
endpoint's token usage on the answer's last chunk, as a local model does.

- :mod:`.transport` sends the request: timeouts, retries on connect errors only (a request whose
  bytes reached the endpoint is never sent twice: no duplicate generation), the endpoint's
  failures as clear errors (:mod:`.failures`);
- :mod:`.openai_chat` and :mod:`.anthropic_messages` speak the two wire formats;
- :mod:`.answer` turns a worker's ``GenerateRequest`` into a call and the replies into chunks;
- :mod:`.policy` holds the settings (light: the worker's settings import it).
"""
