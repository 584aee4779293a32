"""The general-language half of the built-in workload (see make_workloads.py): translation, long articles to
summarise, retrieval-augmented answers over several passages, short factual questions, open writing, extraction
into a format, and multi-turn chats. Written for the project."""

ARTICLE_A = """The city council voted on Tuesday to turn the old freight yard beside the river into a public park, \
ending a debate that has run for almost a decade. The yard, which closed in 2009 when the last rail operator moved \
its depot to the ring road, covers about eleven hectares and has been fenced off since then. Developers had proposed \
several housing schemes for the site, but each was rejected after residents objected to the loss of what many see as \
the only large open space in the eastern districts.

Under the plan approved this week, the council will spend 14 million euros over four years. The first phase, due to \
start next spring, removes the remaining tracks and tests the soil, which is expected to contain oil and heavy metals \
from a century of rail use. Contaminated ground will be capped rather than carted away, a method the council's \
engineers say is cheaper and safer for nearby homes. The second phase adds paths, a playground, a community garden \
and a cycling route that links the park to the existing path along the river.

Two of the old brick goods sheds will be kept. One is to become a covered market on weekends; the other a cafe and a \
room that local groups can book. A councillor who led the campaign for the park said the sheds were "the memory of \
the neighbourhood" and that keeping them had won over many sceptical residents.

Not everyone is pleased. A group of housing associations argued that the city is short of about 6,000 affordable \
homes and that a site served by two tram lines should house people, not lawns. The council replied that it will \
build 400 homes on a smaller plot north of the yard, which the rail company handed over last year. Opposition \
members questioned whether the budget is realistic, noting that a similar park in the west of the city cost nearly \
twice its estimate. The mayor said that an independent audit will review costs each year and publish its findings."""

ARTICLE_B = """Researchers at a university hospital have reported that a simple walking programme cut the number of \
falls among older adults by almost a third. The study followed 1,200 people aged 70 and over for two years. Half of \
them were invited to walk in small groups three times a week with a trained volunteer; the other half received a \
leaflet about staying active and were otherwise left to their usual routine.

By the end of the study, the walking groups had recorded 312 falls, against 451 in the comparison group. Fractures \
fell by a similar share. The effect was largest among people who had fallen at least once in the year before they \
joined, a group that doctors usually find hardest to help. Participants in the walking groups also reported less \
loneliness, which the authors think may explain why most of them kept attending: attendance stayed above seventy \
per cent in the second year.

The programme was cheap. Volunteers were trained in a single day, the walks used public parks and shopping centres \
in bad weather, and the total cost came to about 90 euros per participant per year. The authors estimate that the \
hospital stays avoided were worth several times that amount, though they caution that their cost figures rely on \
national averages rather than on the bills of the people in the study.

Independent experts welcomed the results but pointed to limits. Participants knew which group they were in, and \
those who agreed to join a study about walking may have been healthier and more motivated than older adults in \
general. The study also took place in one region with mild winters. The team now plans a larger trial in three \
countries, with a longer follow-up and a closer look at which people benefit most."""

ARTICLE_C = """A small software company has released the source code of its note-taking app after announcing that \
it can no longer afford to run its servers. The app, which had about 200,000 monthly users at its peak, stored \
notes on the company's cloud service and synced them between phones and computers. The company said revenue from \
subscriptions had fallen steadily since large technology firms began bundling free note-taking tools with their \
operating systems.

Rather than shut the app down, the founders published the code under an open-source licence and added an option \
to sync notes through a folder on any storage service the user already has. Existing users have until the end of \
March to export their notes; after that the servers will be switched off. An export tool writes every note as a \
plain text file with its attachments, so that notes can also be opened without the app.

Within a week, volunteers had forked the project, fixed several long-standing bugs and translated the interface \
into nine more languages. One of the founders said the response had been "the best possible ending" for a product \
the team could not sustain, and that two of the company's four employees will keep contributing in their spare \
time.

Some users are less happy. Reviews in app stores complain that syncing through a shared folder is slower and can \
produce conflicting copies when two devices edit the same note offline. The volunteers say a conflict-resolution \
feature is their first priority. Analysts note that open-sourcing an app at the end of its commercial life has \
become more common, but that only a minority of such projects keep an active community after the first year."""

DOCS = {
    "return": "Returns policy: items can be returned within 30 days of delivery if unused and in their original "
              "packaging. Sale items can be exchanged but not refunded. Refunds go to the original payment method "
              "within 5 working days of the item reaching our warehouse.",
    "shipping": "Shipping: standard delivery takes 3-5 working days and is free on orders over 50 euros; below that "
                "it costs 4.90 euros. Express delivery (next working day if ordered before 14:00) costs 9.90 euros. "
                "We do not ship to PO boxes.",
    "warranty": "Warranty: electronics carry a two-year warranty against manufacturing defects. Damage from drops, "
                "water or unauthorised repairs is not covered. To make a claim, contact support with your order "
                "number and a photo of the fault.",
    "printer": "Printer LX-200 troubleshooting: if pages come out blank, check that the tape has been removed from "
               "the new cartridge. If the printer shows error E4, the paper is jammed: open the rear cover and pull "
               "the sheet out slowly. If Wi-Fi setup fails, hold the Wi-Fi button for five seconds until the light "
               "blinks blue and try again.",
    "leave": "Staff handbook, leave: full-time employees get 25 days of paid leave a year plus public holidays. Up "
             "to five unused days may be carried over to the next year and must be taken by the end of March. "
             "Leave requests of more than ten consecutive days need approval four weeks in advance.",
    "expenses": "Staff handbook, expenses: train travel is reimbursed in second class; first class only for "
                "journeys over four hours. Hotel costs are covered up to 120 euros a night, 160 in capital cities. "
                "Receipts must be submitted within 60 days.",
}


def rag(question: str, *names: str) -> str:
    passages = "\n\n".join(f"[{i + 1}] {DOCS[n]}" for i, n in enumerate(names))
    return (f"Answer the question using only the documents below, and cite the document number you used.\n\n"
            f"{passages}\n\nQuestion: {question}")


EMAIL = """From: Jonas Berg <jonas.berg@fjordtech.no>
Subject: Order 58213 - delivery problem

Hello, I ordered two USB-C docking stations (order 58213, placed on 3 November) and only one arrived on 12 \
November. The invoice says 2 x 89.00 EUR. Could you send the missing one to Storgata 14, 0184 Oslo, or refund it? \
You can reach me on +47 912 34 567. Thanks, Jonas"""

MEETING = """Notes from the planning meeting, 14 January. Present: Aisha (product), Tom (backend), Lena (design), \
Marek (QA). Decisions: the beta moves from 1 February to 15 February because the payment provider's sandbox is not \
ready. Lena will deliver the new onboarding screens by 24 January. Tom owns the migration script and will test it \
on a copy of production data by 31 January. Marek needs two more test devices; Aisha will order them this week. \
Open question: whether the beta includes the Android tablet layout."""

RECIPE = """Lemon pancakes (serves 4). Mix 200 g flour, 2 teaspoons baking powder, a pinch of salt and 30 g sugar. \
Whisk in 2 eggs, 300 ml milk and the zest of one lemon. Rest the batter for 10 minutes. Fry ladlefuls in a little \
butter over medium heat for about 2 minutes a side. Serve with lemon juice and sugar."""

MORE = {
    "translate": [
        "Translate into French:\n\nThe meeting has been moved to Thursday at ten o'clock. Please bring the quarterly "
        "figures and let me know if you cannot attend.",
        "Translate into German:\n\nOur shop will be closed from 24 to 26 December. Orders placed during this time "
        "will be shipped on 27 December. We wish you happy holidays.",
        "Translate into Spanish:\n\nTo reset your password, open the settings page, choose 'Account' and follow the "
        "instructions in the email we send you.",
        "Translate into English:\n\nLe train de 8 h 15 est supprimé en raison de travaux sur la voie. Les voyageurs "
        "sont invités à prendre le bus de remplacement devant la gare.",
        "Translate into English:\n\nWir haben Ihre Bestellung erhalten und werden sie innerhalb von drei Werktagen "
        "versenden. Bei Fragen wenden Sie sich bitte an unseren Kundendienst.",
        "Translate into Italian:\n\nThe museum is open every day except Monday, from nine in the morning to six in "
        "the evening. Entry is free on the first Sunday of the month.",
    ],
    "summarise_long": [
        f"Summarise this news article in three sentences.\n\n{ARTICLE_A}",
        f"What are the main arguments for and against the plan in this article? Answer in a short list.\n\n"
        f"{ARTICLE_A}",
        f"Summarise this article in one paragraph for a newsletter.\n\n{ARTICLE_B}",
        f"List the key findings and the limitations of the study described here.\n\n{ARTICLE_B}",
        f"Summarise this article in three bullet points.\n\n{ARTICLE_C}",
        f"Write a two-sentence summary of this article, then one sentence on what happens next.\n\n{ARTICLE_C}",
    ],
    "rag": [
        rag("Can I get my money back for a sale item?", "shipping", "return", "warranty"),
        rag("How much does delivery cost for a 35 euro order?", "return", "shipping"),
        rag("My new headphones stopped working after I dropped them. Is that covered?", "warranty", "return"),
        rag("The printer shows E4. What should I do?", "printer", "warranty"),
        rag("Can I carry over eight unused leave days?", "expenses", "leave"),
        rag("What hotel budget do I have for a trip to Berlin, and can I travel first class for a 3-hour train "
            "ride?", "leave", "expenses"),
    ],
    "factual_qa": [
        "What is the capital of Australia?",
        "Who wrote the novel 'Pride and Prejudice'?",
        "How many bones are in the adult human body?",
        "What is the chemical symbol for gold?",
        "In which year did the first person walk on the Moon?",
        "What is the boiling point of water at sea level in degrees Fahrenheit?",
    ],
    "writing": [
        "Write a short poem about the first snow of winter.",
        "Write the opening paragraph of a mystery story set in a lighthouse.",
        "Write a product description for a handmade ceramic coffee mug.",
        "Write a friendly email inviting colleagues to a farewell lunch for a coworker.",
        "Write a short motivational speech for a youth football team before a final.",
        "Describe a busy market in a small coastal town, in vivid detail.",
    ],
    "extract": [
        f"Extract the customer's name, order number, address and phone number from this email as JSON.\n\n{EMAIL}",
        f"From this email, list every date and amount mentioned, one per line.\n\n{EMAIL}",
        f"Turn these meeting notes into a Markdown table with columns Owner, Task, Due date.\n\n{MEETING}",
        f"Extract the decisions and the open questions from these notes as two bullet lists.\n\n{MEETING}",
        f"Rewrite this recipe as JSON with keys ingredients (a list of name and quantity) and steps (a list).\n\n"
        f"{RECIPE}",
        f"Extract the ingredients of this recipe as CSV with columns ingredient,quantity,unit.\n\n{RECIPE}",
    ],
}


def _turns(*pairs: str) -> list[dict]:
    roles = ["user", "assistant"] * len(pairs)
    return [{"role": r, "content": c} for r, c in zip(roles, pairs)]


TURNS = [
    _turns("I'm planning a trip to Lisbon in May. What should I see?",
           "Lisbon in May is lovely. Walk through Alfama and up to the Castelo de São Jorge, ride tram 28, visit "
           "Belém for the tower, the Jerónimos Monastery and the custard tarts, and spend an evening in Bairro Alto. "
           "A day trip to Sintra is well worth it.",
           "How many days do I need for all of that?"),
    _turns("Can you explain what a hash table is?",
           "A hash table stores key-value pairs. A hash function turns each key into an index in an array, so "
           "looking up, inserting or deleting a key takes constant time on average. When two keys land on the same "
           "index (a collision), the table resolves it, for example by keeping a small list at each slot.",
           "What happens when the table gets full?"),
    _turns("Write a haiku about autumn.",
           "Crimson leaves drifting\nwhispers of the cooling wind\nthe year exhales slow",
           "Now write one about spring in the same style."),
    _turns("My sourdough bread comes out flat. Any ideas?",
           "Flat sourdough usually means the starter is weak, the dough over-proofed, or it lacked tension when "
           "shaped. Make sure the starter doubles within 4-8 hours of feeding, shorten the bulk ferment if the "
           "kitchen is warm, and shape tightly before the final proof.",
           "My kitchen is about 27 degrees. How long should the bulk ferment be?"),
    _turns("What's the difference between a list and a tuple in Python?",
           "Lists are mutable: you can add, remove or change items. Tuples are immutable once created. Tuples can "
           "be used as dictionary keys and are slightly faster and smaller; lists suit collections that change.",
           "Give me an example where a tuple is the better choice.",
           "Coordinates are a good example: a point (x, y) should not change, and as a tuple it can be a dictionary "
           "key, e.g. distances[(0, 0)] = 0.",
           "And when would a named tuple be better still?"),
    _turns("I need to tell my landlord the heating is broken. Can you help me write a message?",
           "Of course. Something like: \"Dear Mr Novak, the heating in flat 3B stopped working on Monday evening "
           "and the flat is now very cold. Could you arrange a repair as soon as possible? I am at home after 5 pm "
           "on weekdays. Kind regards, Sara\"",
           "Make it a bit firmer, it's the second time this month."),
]
