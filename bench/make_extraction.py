"""Writes bench/extraction.json: the JSON extraction workload (a passage, what to pull out of it, and the schema the
answer must follow), 24 prompts in 6 categories. Kept as code so the schemas stay readable and consistent.

    .venv/bin/python bench/make_extraction.py
"""
import json
from pathlib import Path

S, I, N, B = {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}


def obj(props: dict, required=None) -> dict:
    return {"type": "object", "properties": props, "required": list(required or props), "additionalProperties": False}


def arr(items: dict, lo: int = 0) -> dict:
    return {"type": "array", "items": items, "minItems": lo}


def enum(*values) -> dict:
    return {"enum": list(values)}


W = [
    # people and contacts
    ("contact", "Extract the sender's contact details.",
     "Hi team, thanks for the call today. Best regards,\nMaria Gonzalez\nSenior Procurement Manager, Northwind Logistics\n"
     "Phone: +34 91 555 0192 | Email: m.gonzalez@northwind-logistics.es\nCalle de Alcala 48, 28014 Madrid, Spain",
     obj({"name": S, "title": S, "company": S, "phone": S, "email": S, "city": S, "country": S})),
    ("contact", "List every person mentioned with their role.",
     "The board meeting was chaired by Ingrid Holm (chair). Present were Tomasz Wojcik (treasurer), Aiko Tanaka "
     "(secretary) and two external auditors, Peter Lang and Sofia Reyes. Apologies were received from Daniel Okafor "
     "(vice chair).",
     obj({"people": arr(obj({"name": S, "role": S}), 1)})),
    ("contact", "Extract the candidate profile from this CV summary.",
     "Jonas Berg - Backend engineer with 7 years of experience. Skills: Go, PostgreSQL, Kubernetes, gRPC. Previously "
     "at Spotify (2019-2023) and Klarna (2016-2019). Based in Stockholm, open to remote work. Languages: Swedish, "
     "English, German.",
     obj({"name": S, "years_experience": I, "skills": arr(S), "employers": arr(obj({"company": S, "from": I, "to": I})),
          "city": S, "remote": B, "languages": arr(S)})),
    ("contact", "Extract the patient appointment.",
     "Reminder: Mr. Ahmed Hassan (date of birth 14 March 1962) is booked with Dr. Claire Dubois, cardiology, on "
     "Tuesday 9 April 2024 at 10:30 in room B214. Please bring your insurance card and arrive 15 minutes early.",
     obj({"patient": S, "birth_date": S, "doctor": S, "department": S, "date": S, "time": S, "room": S})),
    # commerce
    ("commerce", "Extract the invoice as JSON.",
     "INVOICE #INV-2024-0815\nDate: 2024-08-15  Due: 2024-09-14\nBill to: Harbor Cafe Ltd, 12 Quay Street, Galway\n"
     "- 20 x Espresso beans 1kg @ 18.50 = 370.00\n- 5 x Oat milk crate @ 24.00 = 120.00\n- 2 x Descaler @ 9.75 = 19.50\n"
     "Subtotal 509.50  VAT 23% 117.19  Total EUR 626.69",
     obj({"invoice_number": S, "date": S, "due": S, "customer": S,
          "items": arr(obj({"description": S, "quantity": I, "unit_price": N, "amount": N}), 1),
          "subtotal": N, "vat_rate": N, "total": N, "currency": S})),
    ("commerce", "Extract the order and its shipping details.",
     "Your order 113-4491827-552 has shipped! 1 x Logitech MX Master 3S mouse (graphite), 2 x USB-C cable 2 m. "
     "Carrier: DHL Express, tracking JD014600003829. Estimated delivery: Friday, 12 July. Shipping to: Lena Fischer, "
     "Bergstrasse 7, 69120 Heidelberg.",
     obj({"order_id": S, "items": arr(obj({"name": S, "quantity": I}), 1), "carrier": S, "tracking": S,
          "delivery": S, "recipient": S, "postcode": S})),
    ("commerce", "Extract the product review as structured data.",
     "Rated 2 out of 5. I bought the AeroPress Go for camping. It brews a decent cup, but the plastic lid cracked "
     "after two weeks and the mug smells of coffee no matter how I wash it. Customer service replaced the lid quickly "
     "though. Would not buy again at this price (39.95).",
     obj({"product": S, "rating": I, "pros": arr(S), "cons": arr(S), "price": N, "would_buy_again": B})),
    ("commerce", "Extract the bank transactions.",
     "03/05 CARD PAYMENT TESCO STORES 4521 -42.17\n03/05 TRANSFER FROM J SMITH RENT SHARE +450.00\n"
     "04/05 DIRECT DEBIT THAMES WATER -38.60\n05/05 CARD PAYMENT TFL TRAVEL -7.80\n06/05 SALARY ACME LTD +2310.55",
     obj({"transactions": arr(obj({"date": S, "description": S, "amount": N,
                                   "kind": enum("card", "transfer", "direct_debit", "salary")}), 1)})),
    # events and travel
    ("travel", "Extract the flight booking.",
     "Booking reference QX7P2L. Passenger: Ms Hannah Keller. Flight LH 1234 from Frankfurt (FRA) to Lisbon (LIS) on "
     "22 June 2024, departing 07:15, arriving 09:20. Seat 14C, economy, 1 checked bag of 23 kg.",
     obj({"reference": S, "passenger": S, "flight": S, "from": S, "to": S, "date": S, "departure": S,
          "arrival": S, "seat": S, "cabin": enum("economy", "premium", "business", "first"), "bags": I})),
    ("travel", "Extract the event details.",
     "Join us for PyCon Nordics 2024! Three days of talks and workshops, 14-16 November at the Copenhagen Bella "
     "Center. Early-bird tickets cost 1800 DKK until 30 September; regular tickets 2400 DKK. Keynotes by Guido van "
     "Rossum and Mariatta Wijaya.",
     obj({"name": S, "start": S, "end": S, "venue": S, "city": S,
          "tickets": arr(obj({"kind": S, "price": N, "currency": S})), "keynote_speakers": arr(S)})),
    ("travel", "Extract the hotel reservation.",
     "Dear Mr. Rossi, we are pleased to confirm your stay at Hotel Edelweiss, Zermatt: check-in Saturday 15 February "
     "2025, check-out Saturday 22 February 2025, one double room with mountain view, half board, for 2 adults. Total "
     "CHF 3,640.00, of which a deposit of CHF 1,000.00 has been charged. Free cancellation until 1 February.",
     obj({"guest": S, "hotel": S, "city": S, "check_in": S, "check_out": S, "nights": I, "adults": I,
          "board": enum("room_only", "breakfast", "half_board", "full_board"), "total": N, "deposit": N,
          "currency": S})),
    ("travel", "Extract the meeting from this email.",
     "Hi both, can we move the Q3 roadmap review to Thursday 18 July, 14:00-15:30 CET? We'll use meeting room "
     "Aurora on the 4th floor, and I'll send a Teams link for Rahul who is remote. Agenda: budget, hiring plan, "
     "launch date. - Eva",
     obj({"title": S, "date": S, "start": S, "end": S, "timezone": S, "location": S, "online": B,
          "organizer": S, "agenda": arr(S)})),
    # technical
    ("tech", "Turn this bug report into a ticket.",
     "Since upgrading to version 4.2.1 the Android app crashes on startup on Pixel 7 devices running Android 14. "
     "Steps: install 4.2.1, open the app, it closes immediately. Works fine on 4.1.9. Logcat shows "
     "java.lang.NullPointerException in SessionManager.restore(). About 30 users reported it today.",
     obj({"title": S, "component": S, "version": S, "last_good_version": S, "platform": S, "device": S,
          "severity": enum("low", "medium", "high", "critical"), "steps": arr(S), "error": S, "reports": I})),
    ("tech", "Parse these log lines.",
     "2024-05-02T10:15:03Z INFO  api  request GET /v1/users 200 12ms\n2024-05-02T10:15:04Z WARN  api  request POST "
     "/v1/orders 429 3ms\n2024-05-02T10:15:09Z ERROR db   query timeout after 5000ms on orders_by_user\n"
     "2024-05-02T10:15:11Z INFO  api  request GET /v1/health 200 1ms",
     obj({"entries": arr(obj({"time": S, "level": enum("DEBUG", "INFO", "WARN", "ERROR"), "service": S,
                              "message": S}), 1)})),
    ("tech", "Extract the dependencies from this requirements file.",
     "# web\nfastapi==0.111.0\nuvicorn[standard]>=0.29\n# data\nnumpy==1.26.4\npandas>=2.2,<3\n# dev\npytest==8.2.0\n"
     "ruff==0.4.4",
     obj({"packages": arr(obj({"name": S, "constraint": S, "group": S}), 1)})),
    ("tech", "Extract the server configuration described here.",
     "The staging cluster runs 3 nodes of type c6i.2xlarge in eu-west-1, behind an application load balancer on "
     "port 443 with TLS. Autoscaling goes from 3 to 9 nodes at 70% CPU. Postgres 15 on RDS, 200 GB storage, "
     "multi-AZ enabled. Backups are kept for 14 days.",
     obj({"environment": S, "nodes": I, "instance_type": S, "region": S, "port": I, "tls": B,
          "autoscaling": obj({"min": I, "max": I, "cpu_threshold": I}),
          "database": obj({"engine": S, "version": I, "storage_gb": I, "multi_az": B}), "backup_days": I})),
    # documents
    ("documents", "Extract the citation.",
     "Vaswani, A., Shazeer, N., Parmar, N., Uszkoreit, J., Jones, L., Gomez, A. N., Kaiser, L., & Polosukhin, I. "
     "(2017). Attention is all you need. In Advances in Neural Information Processing Systems 30 (pp. 5998-6008).",
     obj({"authors": arr(S, 1), "year": I, "title": S, "venue": S, "volume": I, "pages": S})),
    ("documents", "Extract the recipe.",
     "Lemon drizzle cake (serves 8, 1 hour). Ingredients: 225 g butter, 225 g caster sugar, 4 eggs, 225 g self-raising "
     "flour, 1 lemon (zest), 85 g icing sugar for the drizzle. Beat butter and sugar, add eggs one at a time, fold in "
     "flour and zest, bake 45 minutes at 180 C, drizzle with lemon juice and icing sugar while warm.",
     obj({"name": S, "servings": I, "minutes": I, "ingredients": arr(obj({"item": S, "amount": S}), 1),
          "steps": arr(S), "oven_celsius": I})),
    ("documents", "Extract the key terms of this lease.",
     "This agreement is made on 1 March 2024 between Greenfield Properties Ltd (landlord) and Omar Said (tenant) for "
     "Flat 3, 27 Elm Road, Leeds LS6 2AB. The term is 12 months from 1 April 2024. Rent is GBP 950 per month, payable "
     "on the 1st. A deposit of GBP 1,096 is held in a government scheme. Pets are not allowed.",
     obj({"date": S, "landlord": S, "tenant": S, "address": S, "start": S, "months": I, "rent": N, "currency": S,
          "deposit": N, "pets_allowed": B})),
    ("documents", "Extract the facts from this news brief.",
     "OSLO, 4 June (Reuters) - Norwegian battery maker Freyr said on Tuesday it would cut 150 jobs, about a quarter of "
     "its workforce, and pause construction of its Giga Arctic plant in Mo i Rana after failing to secure customer "
     "contracts. Shares fell 8.2% in early trading.",
     obj({"place": S, "date": S, "source": S, "company": S, "country": S, "job_cuts": I, "share_of_workforce": S,
          "project_paused": S, "share_move_percent": N})),
    # classification and short answers
    ("classify", "Classify this support ticket.",
     "I was charged twice for my March subscription (two payments of 12.99 on 3 March). Please refund one of them. "
     "My account email is p.novak@example.com. This is the second time this has happened!",
     obj({"category": enum("billing", "technical", "account", "shipping", "other"),
          "urgency": enum("low", "normal", "high"), "sentiment": enum("positive", "neutral", "negative"),
          "amount": N, "email": S, "summary": S})),
    ("classify", "Label the sentiment of each review.",
     "1. Arrived fast and works perfectly. 2. The battery died after a week, very disappointed. 3. It's okay, does "
     "what it says. 4. Best purchase this year, my kids love it! 5. Stopped charging, support never answered.",
     obj({"reviews": arr(obj({"index": I, "sentiment": enum("positive", "neutral", "negative")}), 1)})),
    ("classify", "Extract the named entities.",
     "Apple CEO Tim Cook met European Commission officials in Brussels on Monday to discuss the Digital Markets Act, "
     "a week after Google and Microsoft presented their compliance plans.",
     obj({"people": arr(S), "organizations": arr(S), "places": arr(S), "laws": arr(S), "day": S})),
    ("classify", "Answer the questions about the passage.",
     "The Danube is Europe's second-longest river, about 2,850 km long. It rises in the Black Forest in Germany and "
     "flows through ten countries, including four capitals (Vienna, Bratislava, Budapest and Belgrade), before "
     "emptying into the Black Sea.",
     obj({"length_km": I, "source": S, "mouth": S, "countries": I, "capitals": arr(S), "longest_in_europe": B})),
]


def main() -> None:
    out = [{"category": c, "prompt": f"{task} Answer with JSON only.\n\n{text}", "schema": schema}
           for c, task, text, schema in W]
    path = Path(__file__).parent / "extraction.json"
    path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {len(out)} prompts to {path}")


if __name__ == "__main__":
    main()
