"""What the tests share, in one place: fleets run through the CLI (fleet.py, cli_forker.py),
the loopback model API (openai_stub.py), AWS faults (faultproxy.py, ec2_answers.py), policies
that misbehave on purpose (fault_policies.py), the IAM evaluator (iam_eval.py) and wheels
(wheelmaker.py). Fixtures live in tests/conftest.py; test modules live in folders by area."""
