"""The learner's prompts, one pair (system, user) per stage. Written for this project.

Every stage is driven by the user's `agent_objective` (what the agent must do) and `learning_objective`
(what kind of experience is worth learning), and replies in JSON matching a pydantic schema.
"""

SUMMARY_SYSTEM = """You review one attempt of an AI agent, to help a learner extract reusable experience.
The agent's objective: {agent_objective}
The learning objective: {learning_objective}

Summarise the attempt step by step: what the agent did at each step (reasoning, tool calls and their
results, with the exact values that mattered), where it went wrong or took a detour, what it missed, and
how it reached its final answer. Keep only what bears on the learning objective. Be concrete and brief."""

SUMMARY_USER = """<question>
{question}
</question>
<ground_truth>{ground_truth}</ground_truth>
<outcome>{outcome}</outcome>
<critique>{critique}</critique>
<trajectory>
{trajectory}
</trajectory>"""

ADVANTAGE_SYSTEM = """You compare several attempts of an AI agent at the same question and extract experiences
that would make the agent succeed more often on similar questions.
The agent's objective: {agent_objective}
The learning objective: {learning_objective}

{compare}
3. Name the kind of problem this is, in general words (problem_kind).
4. Generalise into at most {num_experiences} experience(s), each one sentence in the language of the task
   that says when and what to do: "When <condition>, <strategy>." (or "<topic>: <strategy>."), whose strategy
   says what to do differently in the method, and that would help on other questions of that kind, not only
   this one.
Do not retell the question: name none of its people, places or numbers, and not its answer. The condition
describes a kind of problem or situation; the strategy says what to do in it, in words that would help on a
different question of that kind.{verifier_note}{tool_note}"""
# Steps 1-2 of ADVANTAGE_SYSTEM for a group with better and worse attempts.
ADVANTAGE_COMPARE = """1. Judge which attempts are better and which worse{against_truth}.
2. Find how they differ in method, not in the question's story: the approach each took, a step the worse
   ones skipped, did out of order or assumed without checking, and the form of their final answer. The root
   cause of a failure is the first point where a worse attempt's method went wrong."""
# Steps 1-2 for a group whose attempts all lost (`practice.all_lost_groups_per_step`): none is better.
ADVANTAGE_COMPARE_ALL_LOST = """1. Every attempt lost: none is better. In your analysis, first solve the question
   yourself, step by step, until you reach the ground truth; then set each attempt against your solution{notes}.
2. Find where their method departed from yours, not in the question's story: a step they skipped, did out of
   order or assumed without checking, or the form of their final answer. The root cause is the first point where
   their method went wrong; the experience says what to do there instead, on any question of this kind."""
# Added when the ground truth is given: the verifier's note shows the value it read from each final answer.
ADVANTAGE_VERIFIER_NOTE = """
Each attempt carries the verifier's note: what it read as the final answer and what it expected. When a worse
attempt reasoned soundly and lost on its final answer's form (how far it rounded, its unit, sign or notation),
that form is the root cause, and the experience says which form to give. The agent never sees the verifier:
the experience tells the agent what to do, and does not mention the verifier."""
# Added only when an attempt of the group called a tool (so tool-free prompts stay as they were measured).
ADVANTAGE_TOOL_NOTE = """
Each attempt lists the tools it called, how often, and whether they failed. When the better and the worse
attempts differ in which tool they called (or in calling one at all), the experience says which tool to
call, or to avoid, for which kind of request, by the tool's name."""
# The two notes above for a group whose attempts all lost.
ADVANTAGE_VERIFIER_NOTE_ALL_LOST = """
Each attempt carries the verifier's note: what it read as the final answer and what it expected. When the
attempts reasoned soundly and lost on their final answer's form (how far it rounded, its unit, sign or notation),
that form is the root cause, and the experience says which form to give. The agent never sees the verifier:
the experience tells the agent what to do, and does not mention the verifier."""
ADVANTAGE_TOOL_NOTE_ALL_LOST = """
Each attempt lists the tools it called, how often, and whether they failed. When the attempts called a tool that
failed or did not fit, or none where one was needed, the experience says which tool to call, or to avoid, for
which kind of request, by the tool's name."""
# No example experience here: small learners copied one verbatim at every step (Qwen2.5-Coder-0.5B and 1.5B
# in benchmarks/learning/learning_gain.py: "When a problem gives a price per item and a number of items, ...").

ADVANTAGE_USER = """<question>
{question}
</question>
<ground_truth>{ground_truth}</ground_truth>
<attempts>
{attempts}
</attempts>"""
# Added on a second look (`learner_retries`): what this step's first proposals became.
ADVANTAGE_REFUSED = """
<refused>
Experiences already proposed from this practice step were refused, each for the reason given:
{refused}
Do not propose any of them again, or one that says the same: compare the attempts again and find what else the
{instead}.
</refused>"""
# How ADVANTAGE_REFUSED ends, for a group with better and worse attempts, and for one whose attempts all lost.
REFUSED_INSTEAD = "better ones did differently"
REFUSED_INSTEAD_ALL_LOST = "ground truth shows they should have done"

GROUP_UPDATE_SYSTEM = """You maintain a short library of experiences for an AI agent.
The agent's objective: {agent_objective}
The learning objective: {learning_objective}

For each new experience, choose one operation against the existing library:
- ADD: it is new and useful (give its content; the system assigns the id).
- UPDATE: it refines or corrects an existing experience (give that id and the improved content, which
  should be more general than either).
- DELETE: an existing experience is wrong, harmful or made obsolete (give its id; no content needed).
- NONE: it is already covered or not useful.
Use only ids that appear in the existing library. Keep each content to one sentence that says when and what
to do, in the form and language of the experiences ("When <condition>, <strategy>." or "<topic>: <strategy>.").
Give a one-sentence rationale for each operation."""

GROUP_UPDATE_USER = """<existing_library>
{library}
</existing_library>
<new_experiences>
{experiences}
</new_experiences>"""

# Restating: the screening refused a proposal only for details of its own question (names, numbers, copied words;
# its answer or the verifier's note in its condition) around a strategy (utu.practice.screening.tells_its_story).
RESTATE_SYSTEM = """You maintain a short library of experiences for an AI agent.
The agent's objective: {agent_objective}
The learning objective: {learning_objective}

An experience learned from a question was refused because it tells the story of that question: it names
the question's people, objects, numbers or answer, copies its words, or speaks of the verifier, which the agent
never sees. Keep only what it says to do, for any question of the same kind: name the kind of problem in general
words (problem_kind), then the strategy, in the language of the experience, naming none of the question's people,
objects or numbers, nor its answer, nor the verifier."""
# Asked for the whole sentence instead, Qwen2.5-Coder-1.5B copied the refused one word for word (3 of 3);
# asked for the kind and the strategy apart, it dropped the story (2026-11-26).

RESTATE_USER = """<question>
{question}
</question>
<experience>{experience}</experience>
<refused_because>{reason}</refused_because>"""

BATCH_UPDATE_SYSTEM = """You consolidate the operations proposed for an experience library by several learners
in one round, into the final list of operations to apply.
Rules: merge ADDs that say the same thing into one ADD; keep distinct ADDs; merge several UPDATEs of the same
id into one UPDATE that captures their shared insight; a DELETE of an id wins over any UPDATE of it; drop
operations that would make the library redundant. Use only ids of the existing library."""

BATCH_UPDATE_USER = """<existing_library>
{library}
</existing_library>
<proposed_operations>
{operations}
</proposed_operations>"""
