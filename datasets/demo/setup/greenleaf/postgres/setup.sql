CREATE TABLE public.stores(
  store_id serial PRIMARY KEY,
  store_name character varying(100) NOT NULL,
  city character varying(60) NOT NULL,
  state character(2) NOT NULL,
  opened_on date NOT NULL,
  has_greenhouse boolean NOT NULL DEFAULT false,
  manager_name character varying(100),
  sq_footage integer
);

CREATE TABLE public.categories(
  category_id serial PRIMARY KEY,
  category_name character varying(60) NOT NULL,
  parent_category_id integer,
  is_living boolean NOT NULL,
  description text
);

CREATE TABLE public.suppliers(
  supplier_id serial PRIMARY KEY,
  supplier_name character varying(100) NOT NULL,
  country character varying(60) NOT NULL,
  contact_email character varying(120),
  is_organic_certified boolean NOT NULL DEFAULT false,
  lead_time_days integer NOT NULL,
  rating numeric(3,1)
);

CREATE TABLE public.products(
  product_id serial PRIMARY KEY,
  product_name character varying(120) NOT NULL,
  category_id integer NOT NULL,
  supplier_id integer,
  sku character varying(20) NOT NULL,
  unit_price numeric(10,2) NOT NULL,
  cost_price numeric(10,2),
  stock_qty integer NOT NULL DEFAULT 0,
  care_info jsonb,
  is_active boolean NOT NULL DEFAULT true,
  added_on date NOT NULL
);

CREATE TABLE public.customers(
  customer_id serial PRIMARY KEY,
  first_name character varying(60) NOT NULL,
  last_name character varying(60) NOT NULL,
  email character varying(120) NOT NULL,
  phone character varying(20),
  city character varying(60),
  signup_date date NOT NULL,
  loyalty_tier character varying(20),
  marketing_opt_in boolean NOT NULL DEFAULT false,
  home_store_id integer
);

CREATE TABLE public.orders(
  order_id serial PRIMARY KEY,
  customer_id integer,
  store_id integer NOT NULL,
  order_ts timestamp without time zone NOT NULL,
  channel character varying(20) NOT NULL,
  status character varying(20) NOT NULL,
  discount_code character varying(20),
  shipping_fee numeric(10,2) NOT NULL DEFAULT 0,
  notes text
);

CREATE TABLE public.order_items(
  order_item_id serial PRIMARY KEY,
  order_id integer NOT NULL,
  product_id integer NOT NULL,
  quantity integer NOT NULL,
  unit_price numeric(10,2) NOT NULL,
  discount_pct numeric(5,2) NOT NULL DEFAULT 0
);

CREATE TABLE public.reviews(
  review_id serial PRIMARY KEY,
  product_id integer NOT NULL,
  customer_id integer NOT NULL,
  rating smallint NOT NULL,
  review_text text,
  review_date date NOT NULL,
  verified_purchase boolean NOT NULL DEFAULT false
);
