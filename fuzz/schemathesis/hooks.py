"""Extra schemathesis check: every 4xx and 5xx answer carries an error code.

Loaded with SCHEMATHESIS_HOOKS=fuzz.schemathesis.hooks (see scripts/schemathesis).
"""

import schemathesis


@schemathesis.check
def error_answers_carry_a_code(ctx, response, case):
    if response.status_code < 400:
        return None
    try:
        body = response.json()
    except Exception as error:  # noqa: BLE001 - any decode failure is the finding
        raise AssertionError(f"{response.status_code} answer is not JSON: {error}") from None
    if not isinstance(body, dict):
        raise AssertionError(f"{response.status_code} answer is not a JSON object")
    code = body.get("code") or body.get("error")
    if not isinstance(code, str) or not code:
        raise AssertionError(f"{response.status_code} answer has no error code: {body}")
    return None
