"""Builds the second labelled set of docs/evaluation.md: plain text with no Markdown structure (three software
licences from Debian's base-files and four chapters of the Python language reference from CPython's pydoc_data),
and its questions.

The questions were written by hand (by the engineer, an AI model, reading each text once) before any
configuration was measured on them: each is phrased the way a user would ask, mostly without the passage's own
words, and each answer is an exact excerpt of one to three sentences, given here by its first and last words and
located in the text with any run of whitespace (and the box-drawing ``*`` of MPL's warranty sections) between
words. The documents are copied into docs/ once (committed, so the offsets never move with a Debian or Python
update); the queries are rewritten from this file.

    .venv/bin/python bench/data/plain/build.py            # rewrites queries.jsonl (and docs/ with --copy)
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOCS = HERE / "docs"
SOURCES = {
    "apache-2.0.txt": "/usr/share/common-licenses/Apache-2.0",
    "mpl-2.0.txt": "/usr/share/common-licenses/MPL-2.0",
    "gpl-3.txt": "/usr/share/common-licenses/GPL-3",
}
PYDOC_TOPICS = {"python-execution-model.txt": "execmodel", "python-try.txt": "try", "python-import.txt": "import"}

# (document, question, the answer's first words, its last words)
QUESTIONS = [
    # Apache License 2.0
    (
        "apache-2.0.txt",
        "If one company owns 60% of another's shares, are they treated as the same party?",
        '"Legal Entity" shall mean',
        "beneficial ownership of such entity.",
    ),
    (
        "apache-2.0.txt",
        "Does code that only links to the library's API count as a derivative?",
        "For the purposes of this License, Derivative Works shall not include",
        "the Work and Derivative Works thereof.",
    ),
    (
        "apache-2.0.txt",
        "What happens to my patent rights if I sue someone claiming the software infringes my patent?",
        "If You institute patent litigation",
        "as of the date such litigation is filed.",
    ),
    (
        "apache-2.0.txt",
        "Do I have to mark files I changed when I redistribute?",
        "(b) You must cause any modified files",
        "stating that You changed the files; and",
    ),
    (
        "apache-2.0.txt",
        "Can I put my own license terms on the modifications I made?",
        "You may add Your own copyright statement to Your modifications",
        "complies with the conditions stated in this License.",
    ),
    (
        "apache-2.0.txt",
        "If I send a patch to the project, under what terms is it accepted by default?",
        "Unless You explicitly state otherwise, any Contribution",
        "without any additional terms or conditions.",
    ),
    (
        "apache-2.0.txt",
        "Am I allowed to use the project's logo and brand names?",
        "This License does not grant permission to use the trade names",
        "reproducing the content of the NOTICE file.",
    ),
    (
        "apache-2.0.txt",
        "Who carries the risk of deciding whether the software is fit to redistribute?",
        "You are solely responsible for determining the appropriateness",
        "exercise of permissions under this License.",
    ),
    (
        "apache-2.0.txt",
        "Could a contributor owe me money if the program causes my computer to fail?",
        "In no event and under no legal theory",
        "advised of the possibility of such damages.",
    ),
    (
        "apache-2.0.txt",
        "May I sell a support contract for software I redistribute?",
        "While redistributing the Work or Derivative Works thereof, You may choose to offer",
        "obligations and/or rights consistent with this License.",
    ),
    (
        "apache-2.0.txt",
        "What does the NOTICE file's text legally change?",
        "The contents of the NOTICE file are for informational purposes only",
        "do not modify the License.",
    ),
    (
        "apache-2.0.txt",
        "How long does the copyright permission last and can it be taken back?",
        "2. Grant of Copyright License.",
        "Work and such Derivative Works in Source or Object form.",
    ),
    # Mozilla Public License 2.0
    (
        "mpl-2.0.txt",
        "Which GNU licences count as secondary licences?",
        '"Secondary License" means either',
        "or any later versions of those licenses.",
    ),
    (
        "mpl-2.0.txt",
        "From what moment does a contributor's grant start to apply?",
        "The licenses granted in Section 2.1 with respect to any Contribution become effective",
        "first distributes such Contribution.",
    ),
    (
        "mpl-2.0.txt",
        "Is there a patent licence for code the contributor later deleted?",
        "no patent license is granted by a Contributor:",
        "removed from Covered Software; or",
    ),
    (
        "mpl-2.0.txt",
        "If I ship a compiled binary, what must I offer about the source?",
        "(a) such Covered Software must also be made available in Source Code Form",
        "at a charge no more than the cost of distribution to the recipient; and",
    ),
    (
        "mpl-2.0.txt",
        "Can I combine MPL code with my own proprietary files and pick my own licence for the whole?",
        "You may create and distribute a Larger Work under terms of Your choice",
        "requirements of this License for the Covered Software.",
    ),
    (
        "mpl-2.0.txt",
        "Am I allowed to edit the copyright notices in the source files?",
        "You may not remove or alter the substance of any license notices",
        "to remedy known factual inaccuracies.",
    ),
    (
        "mpl-2.0.txt",
        "If a law prevents me from following the licence, what do I have to write down?",
        "(b) describe the limitations and the code they affect.",
        "included with all distributions of the Covered Software under this License.",
    ),
    (
        "mpl-2.0.txt",
        "I broke the licence terms but fixed it; when do my rights come back for good?",
        "(b) on an ongoing basis, if such Contributor fails to notify You",
        "prior to 60 days after You have come back into compliance.",
    ),
    (
        "mpl-2.0.txt",
        "Do end users keep their licences when the distributor's licence is terminated?",
        "In the event of termination under Sections 5.1 or 5.2 above",
        "prior to termination shall survive termination.",
    ),
    (
        "mpl-2.0.txt",
        "Where can a lawsuit about this licence be filed?",
        "Any litigation relating to this License may be brought only",
        "without reference to its conflict-of-law provisions.",
    ),
    (
        "mpl-2.0.txt",
        "Who is allowed to publish a new version of the MPL?",
        "Mozilla Foundation is the license steward.",
        "the right to modify or publish new versions of this License.",
    ),
    (
        "mpl-2.0.txt",
        "What happens if a court finds one clause unenforceable?",
        "If any provision of this License is held to be unenforceable",
        "only to the extent necessary to make it enforceable.",
    ),
    (
        "mpl-2.0.txt",
        "Is the contributor liable if someone dies because of the software's failure?",
        "This limitation of liability shall not apply to liability for death or personal injury",
        "prohibits such limitation.",
    ),
    # GNU GPL version 3
    (
        "gpl-3.txt",
        "Does letting people use my program over a network count as distributing it?",
        "Mere interaction with a user through a computer network",
        "is not conveying.",
    ),
    (
        "gpl-3.txt",
        "What exactly does source code mean here?",
        'The "source code" for a work means',
        "for making modifications to it.",
    ),
    (
        "gpl-3.txt",
        "Do I need to ship the operating system's libraries with the corresponding source?",
        "However, it does not include the work's System Libraries",
        "which are not part of the work.",
    ),
    (
        "gpl-3.txt",
        "Is the output of a GPL program itself under the GPL?",
        "The output from running a covered work is covered by this License only if",
        "constitutes a covered work.",
    ),
    ("gpl-3.txt", "Can I sublicense the program?", "Sublicensing is not allowed;", "section 10 makes it unnecessary."),
    (
        "gpl-3.txt",
        "Does the licence let me forbid users from breaking my DRM?",
        "When you convey a covered work, you waive any legal power to forbid circumvention",
        "legal rights to forbid circumvention of technological measures.",
    ),
    (
        "gpl-3.txt",
        "May I charge money for copies?",
        "You may charge any price or no price for each copy that you convey",
        "support or warranty protection for a fee.",
    ),
    (
        "gpl-3.txt",
        "When I modify the program, what date information must the files carry?",
        "a) The work must carry prominent notices stating that you modified it",
        "giving a relevant date.",
    ),
    (
        "gpl-3.txt",
        "Does putting a GPL program on the same DVD as other programs make them GPL too?",
        "Inclusion of a covered work in an aggregate",
        "to the other parts of the aggregate.",
    ),
    (
        "gpl-3.txt",
        "How long must a written offer for the source code remain valid?",
        "accompanied by a written offer, valid for at least three years",
        "customer support for that product model",
    ),
    (
        "gpl-3.txt",
        "Can I distribute binaries through BitTorrent?",
        "e) Convey the object code using peer-to-peer transmission",
        "offered to the general public at no charge under subsection 6d.",
    ),
    (
        "gpl-3.txt",
        "When is a product considered a consumer product?",
        'A "User Product" is either (1) a "consumer product"',
        "incorporation into a dwelling.",
    ),
    (
        "gpl-3.txt",
        "If the device's firmware is in ROM, do I still have to give installation keys?",
        "But this requirement does not apply if neither you nor any third party retains the ability",
        "(for example, the work has been installed in ROM).",
    ),
    (
        "gpl-3.txt",
        "Can the network operator cut off a modified device?",
        "Access to a network may be denied when the modification itself",
        "rules and protocols for communication across the network.",
    ),
    (
        "gpl-3.txt",
        "If I violate the licence once, how do I get my rights back permanently?",
        "Moreover, your license from a particular copyright holder is reinstated permanently",
        "prior to 30 days after your receipt of the notice.",
    ),
    (
        "gpl-3.txt",
        "Do I have to accept the licence just to run a copy?",
        "You are not required to accept this License in order to receive or run a copy of the Program.",
        "You are not required to accept this License in order to receive or run a copy of the Program.",
    ),
    (
        "gpl-3.txt",
        "What happens to the licence when a company that uses the software is acquired?",
        "If propagation of a covered work results from an entity transaction",
        "if the predecessor has it or can get it with reasonable efforts.",
    ),
    (
        "gpl-3.txt",
        "Am I responsible for making others comply with the licence?",
        "You are not responsible for enforcing compliance by third parties with this License.",
        "You are not responsible for enforcing compliance by third parties with this License.",
    ),
    (
        "gpl-3.txt",
        "What kinds of extra terms may I add to code I contribute?",
        "a) Disclaiming warranty or limiting liability differently",
        "author attributions in that material",
    ),
    # Python language reference: execution model
    (
        "python-execution-model.txt",
        "Which pieces of Python code run as a single unit?",
        "A *block* is a piece of Python program text that is executed as a unit.",
        "a module, a function body, and a class definition.",
    ),
    (
        "python-execution-model.txt",
        "What does a star import bring into my namespace?",
        'The "import" statement of the form "from ... import *" binds all names',
        "This form may only be used at the module level.",
    ),
    (
        "python-execution-model.txt",
        "Why do I get an error when I use a variable in a function before assigning it?",
        "If the current scope is a function scope, and the name refers to a local variable",
        '"UnboundLocalError" is a subclass of "NameError".',
    ),
    (
        "python-execution-model.txt",
        "In which order are global and built-in names looked up?",
        "The global namespace is searched first.",
        "the builtins namespace is searched.",
    ),
    (
        "python-execution-model.txt",
        "Why can't a generator expression in a class body see the class's variables?",
        "The scope of names defined in a class block is limited to the class block;",
        "implemented using a function scope.",
    ),
    (
        "python-execution-model.txt",
        "What error do I get when nonlocal names a variable that doesn't exist?",
        '"SyntaxError" is raised at compile time if the given name does not exist',
        "in any enclosing function scope.",
    ),
    (
        "python-execution-model.txt",
        "Should I change __builtins__ to override a built-in function?",
        'Users should not touch "__builtins__";',
        "modify its attributes appropriately.",
    ),
    (
        "python-execution-model.txt",
        "Are free variables resolved when the code is compiled?",
        "Name resolution of free variables occurs at runtime, not at compile time.",
        "Name resolution of free variables occurs at runtime, not at compile time.",
    ),
    # Python language reference: the try statement
    (
        "python-try.txt",
        "Where must a bare except go among several handlers?",
        'An expression-less "except" clause, if present, must be last;',
        "it matches any exception.",
    ),
    (
        "python-try.txt",
        "What happens if evaluating the exception type in an except header itself fails?",
        'If the evaluation of an expression in the header of an "except" clause raises an exception',
        'the entire "try" statement raised the exception).',
    ),
    (
        "python-try.txt",
        "Why is the variable from 'except ... as e' gone after the handler?",
        "Exceptions are cleared because with the traceback attached to them",
        "until the next garbage collection occurs.",
    ),
    (
        "python-try.txt",
        "Can several except* handlers run for one exception group?",
        'This means that multiple "except*" clauses can execute',
        "all matching exceptions.",
    ),
    (
        "python-try.txt",
        "Can I use except and except* in the same try?",
        'It is not possible to mix "except" and "except*" in the same "try".',
        'It is not possible to mix "except" and "except*" in the same "try".',
    ),
    (
        "python-try.txt",
        "When does the else block of a try run?",
        'The optional "else" clause is executed if the control flow leaves the "try" suite',
        '"break" statement was executed.',
    ),
    (
        "python-try.txt",
        "What happens to a pending exception when finally returns?",
        'If the "finally" clause executes a "return", "break" or "continue" statement',
        "the saved exception is discarded:",
    ),
]


def _pattern(words: str) -> str:
    # Any run of whitespace in the source (hard-wrapped lines, indentation, MPL's boxed "*" margins) matches one
    # space of the phrase.
    return r"[\s*]+".join(re.escape(part) for part in words.split())


def locate(text: str, first: str, last: str) -> tuple[int, int]:
    starts = [m.start() for m in re.finditer(_pattern(first), text)]
    if len(starts) != 1:
        raise SystemExit(f"{first!r} occurs {len(starts)} times")
    match = re.compile(_pattern(last)).search(text, starts[0])
    if match is None:
        raise SystemExit(f"{last!r} is not after {first!r}")
    return starts[0], match.end()


def copy_documents() -> None:
    import pydoc_data.topics

    DOCS.mkdir(exist_ok=True)
    for name, source in SOURCES.items():
        (DOCS / name).write_text(Path(source).read_text(encoding="utf-8"), encoding="utf-8")
    for name, topic in PYDOC_TOPICS.items():
        (DOCS / name).write_text(pydoc_data.topics.topics[topic], encoding="utf-8")


def main() -> None:
    if "--copy" in sys.argv:
        copy_documents()
    lines = []
    for doc_id, question, first, last in QUESTIONS:
        text = (DOCS / doc_id).read_text(encoding="utf-8")
        start, end = locate(text, first, last)
        answer = {"doc_id": doc_id, "start": start, "end": end, "text": text[start:end]}
        lines.append(json.dumps({"query": question, "answers": [answer]}, ensure_ascii=False))
    (HERE / "queries.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(lines)} queries over {len(list(DOCS.iterdir()))} documents")


if __name__ == "__main__":
    main()
