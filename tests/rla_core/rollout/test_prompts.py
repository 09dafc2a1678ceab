from rla_core.rollout.prompts import Turn, parse_action, policy_answer, policy_prompt

COMMANDS = ["go to fridge 1", "open fridge 1", "look"]


def test_prompt_numbers_commands_from_one_and_keeps_recent_history():
    history = [Turn(f"a{i}", f"o{i}") for i in range(5)]
    text = policy_prompt("Your task is to: x.", history, "You see y.", COMMANDS, keep=2)
    assert "1: go to fridge 1\n2: open fridge 1\n3: look" in text
    assert "> a3\no3\n> a4\no4" in text and "a2" not in text
    assert text.endswith("Answer:")


def test_parse_action_maps_index_to_command_and_rejects_out_of_range():
    assert parse_action(policy_answer(2), COMMANDS) == "open fridge 1"
    assert parse_action(" \\boxed{3}", COMMANDS) == "look"
    assert parse_action(" \\boxed{4}", COMMANDS) is None
    assert parse_action(" \\boxed{0}", COMMANDS) is None
    assert parse_action("2", COMMANDS) is None
