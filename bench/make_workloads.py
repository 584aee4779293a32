"""Writes edgespec/workloads.json, the built-in prompts of `edgespec bench` (13 categories x 6), from code so edits
stay readable. Every prompt and passage here was written for the project (no dataset), released with it under MIT."""
import json
from pathlib import Path

CODE_A = '''def load_users(path):
    users = []
    with open(path) as f:
        for line in f:
            name, age, email = line.strip().split(",")
            users.append({"name": name, "age": int(age), "email": email})
    return users


def adults(users):
    result = []
    for u in users:
        if u["age"] >= 18:
            result.append(u)
    return result
'''
CODE_B = '''class Stack:
    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        return self.items.pop()

    def peek(self):
        return self.items[-1]

    def size(self):
        return len(self.items)
'''
CODE_C = '''function fetchJson(url, callback) {
  const xhr = new XMLHttpRequest();
  xhr.open("GET", url);
  xhr.onload = function () {
    if (xhr.status === 200) {
      callback(null, JSON.parse(xhr.responseText));
    } else {
      callback(new Error("HTTP " + xhr.status));
    }
  };
  xhr.send();
}
'''
CODE_D = '''def mean(xs):
    total = 0
    for x in xs:
        total = total + x
    return total / len(xs)


def variance(xs):
    m = mean(xs)
    total = 0
    for x in xs:
        total = total + (x - m) ** 2
    return total / len(xs)
'''
TEXT_A = ("The Rhine is one of the major European rivers. It begins in the Swiss canton of Graubünden in the "
          "southeastern Swiss Alps, forms part of the Swiss-Austrian, Swiss-Liechtenstein, Swiss-German and then "
          "the Franco-German border, then flows through the German Rhineland and the Netherlands and eventually "
          "empties into the North Sea. The largest city on the river Rhine is Cologne, Germany, with a population "
          "of more than 1,050,000 people. It is the second-longest river in Central and Western Europe, after the "
          "Danube, at about 1,230 km.")
TEXT_B = ("Photosynthesis is the process by which green plants, algae and some bacteria convert light energy into "
          "chemical energy. During photosynthesis, light energy is captured by chlorophyll and used to convert "
          "water, carbon dioxide and minerals into oxygen and energy-rich organic compounds. The oxygen released "
          "is a by-product; the sugars produced are used by the plant for growth or stored as starch.")
TEXT_C = ("The first transatlantic telegraph cable was completed on 5 August 1858. Queen Victoria sent a message "
          "to President James Buchanan, which took over sixteen hours to transmit. The cable failed after only "
          "three weeks because its insulation broke down under the high voltages applied to push signals through. "
          "A durable cable was not laid until 1866, by the steamship Great Eastern.")
TEXT_D = ("Rust is a multi-paradigm programming language that emphasises performance, type safety and "
          "concurrency. It enforces memory safety, meaning that all references point to valid memory, without a "
          "garbage collector. To do so it uses a borrow checker that tracks the lifetime of references during "
          "compilation. Rust was started by Graydon Hoare at Mozilla Research in 2006 and its first stable "
          "release, 1.0, came out in May 2015.")

W = {
    "code_write": [
        "Write a Python function that checks whether a string is a palindrome, ignoring case and spaces.",
        "Write a Python function `merge_sorted(a, b)` that merges two sorted lists into one sorted list.",
        "Write a JavaScript function that debounces another function by a given number of milliseconds.",
        "Write a Python class `LRUCache` with get and put methods, using OrderedDict.",
        "Write a SQL query that returns the five customers with the highest total order value from tables "
        "customers(id, name) and orders(id, customer_id, amount).",
        "Write a Bash script that prints the ten largest files under the current directory.",
    ],
    "code_edit": [
        f"Add type hints and docstrings to this code. Return the whole file.\n\n```python\n{CODE_A}```",
        f"Rewrite `adults` as a list comprehension and keep everything else the same. Return the whole file.\n\n"
        f"```python\n{CODE_A}```",
        f"Make `pop` and `peek` raise IndexError with a clear message when the stack is empty. Return the whole "
        f"class.\n\n```python\n{CODE_B}```",
        f"Convert this function to use fetch and async/await. Return the whole function.\n\n```javascript\n{CODE_C}```",
        f"Rename `total` to `acc` everywhere in this code and return the whole file.\n\n```python\n{CODE_D}```",
        f"Add an `is_empty` method to this class and return the whole class.\n\n```python\n{CODE_B}```",
    ],
    "summarise": [
        f"Summarise the following text in two sentences.\n\n{TEXT_A}",
        f"Summarise the following text in one sentence.\n\n{TEXT_B}",
        f"Summarise the following text for a ten-year-old.\n\n{TEXT_C}",
        f"Give three bullet points summarising this text.\n\n{TEXT_D}",
        f"Summarise the key facts of this text as a short list.\n\n{TEXT_A}",
        f"Write a one-paragraph summary of this text.\n\n{TEXT_C}",
    ],
    "passage_qa": [
        f"Read the passage and answer the question.\n\nPassage: {TEXT_A}\n\nQuestion: Where does the Rhine begin "
        "and where does it end?",
        f"Read the passage and answer the question.\n\nPassage: {TEXT_B}\n\nQuestion: What is released as a "
        "by-product of photosynthesis?",
        f"Read the passage and answer the question.\n\nPassage: {TEXT_C}\n\nQuestion: Why did the 1858 cable fail?",
        f"Read the passage and answer the question.\n\nPassage: {TEXT_D}\n\nQuestion: Who started Rust, and when "
        "was version 1.0 released?",
        f"Read the passage and answer the question.\n\nPassage: {TEXT_A}\n\nQuestion: What is the largest city "
        "on the Rhine?",
        f"Read the passage and answer the question.\n\nPassage: {TEXT_C}\n\nQuestion: Which ship laid the 1866 "
        "cable?",
    ],
    "math": [
        "What is 17 * 24? Show your working.",
        "A train travels 120 km in 1.5 hours. What is its average speed in km/h? Explain briefly.",
        "Solve for x: 3x + 7 = 25.",
        "What is the sum of the integers from 1 to 100? Explain the method.",
        "A shirt costs $40 and is discounted by 15%. What is the new price?",
        "Is 221 a prime number? Explain.",
    ],
    "chat": [
        "Hi! Can you suggest a name for a grey cat?",
        "What are three tips for sleeping better?",
        "Tell me a short joke about programmers.",
        "How do I politely decline a meeting invitation?",
        "What should I pack for a weekend hiking trip?",
        "Explain the difference between weather and climate in simple words.",
    ],
}

OUT = Path(__file__).resolve().parent.parent / "edgespec" / "workloads.json"

if __name__ == "__main__":
    from more_workloads import MORE, TURNS

    items = [{"category": c, "prompt": p} for c, ps in {**W, **MORE}.items() for p in ps]
    items += [{"category": "multiturn", "messages": m} for m in TURNS]
    OUT.write_text(json.dumps(items, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(items)} prompts in {len({i['category'] for i in items})} categories -> {OUT}")
